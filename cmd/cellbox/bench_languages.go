package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/config"
)

// The languages' benchmark (cellbox bench --languages js,ts,r,bash): for each language, a
// new session → its first result (the sandbox from the warm pool, the language's kernel
// started in it), a trivial cell in a warm session, and an idle session's cost in the
// host's available memory; beside Python's, measured the same way in the same run, and the
// bare runtime's own start on the host.

// langTrivial is each language's trivial cell, and what it shows.
var langTrivial = map[string]struct{ code, want string }{
	api.LanguagePython:     {"1 + 1", "2"},
	api.LanguageJavaScript: {"1 + 1", "2"},
	api.LanguageTypeScript: {"const a: number = 1; a + 1", "2"},
	api.LanguageR:          {"1 + 1", "[1] 2"},
	api.LanguageBash:       {"echo 2", "2"},
}

// langBare is the runtime's own start on the host, the reference of the first result.
var langBare = map[string][]string{
	api.LanguagePython:     {"python3", "-c", "print(1 + 1)"},
	api.LanguageJavaScript: {"node", "-e", "console.log(1 + 1)"},
	api.LanguageR:          {"Rscript", "-e", "1 + 1"},
	api.LanguageBash:       {"bash", "-c", "echo 2"},
}

type langResult struct {
	lang        string
	first, cell []time.Duration
	bare        []time.Duration
	avail       float64 // MemAvailable drop per idle session, bytes
	idleN       int
}

func benchLanguages(ctx context.Context, cfg config.Config, list string, n benchN) error {
	langs := []string{api.LanguagePython}
	for _, l := range config.SplitList(list) {
		lang, ok := api.LanguageOf(l)
		if !ok {
			return fmt.Errorf("--languages: unknown language %q", l)
		}
		if lang != api.LanguagePython {
			langs = append(langs, lang)
		}
	}
	b, stop, err := startBench(ctx, cfg, "languages")
	if err != nil {
		return err
	}
	defer stop()
	var rows []langResult
	for _, lang := range langs {
		r := langResult{lang: lang}
		b.progress("%s: new sessions ×%d", lang, n.starts)
		check := func(r *api.ExecuteResult) error { return checkTrivial(lang, r) }
		if r.first, err = b.firstResults(ctx, n.starts, api.CreateSessionRequest{Language: lang}, langTrivial[lang].code, check); err != nil {
			return fmt.Errorf("%s: %w", lang, err)
		}
		b.progress("%s: trivial cells ×%d", lang, n.cells)
		if r.cell, err = b.warmCells(ctx, lang, langTrivial[lang].code, n.cells, 5, check); err != nil {
			return fmt.Errorf("%s: %w", lang, err)
		}
		b.progress("%s: idle sessions ×%d", lang, min(n.idle, 20))
		if r.avail, r.idleN, err = b.langIdle(ctx, lang, min(n.idle, 20)); err != nil {
			return fmt.Errorf("%s: %w", lang, err)
		}
		if argv := langBare[lang]; argv != nil {
			r.bare = timeCmd(5, argv[0], argv[1:]...)
		}
		rows = append(rows, r)
	}
	fmt.Printf("\n| language | new session → first result, p50 / max (n=%d) | bare runtime on the host, p50 (n=5) | trivial cell, warm session, p50 / p99 (n=%d) | idle session: MemAvailable drop (n=%d) |\n|---|---|---|---|---|\n",
		n.starts, n.cells, min(n.idle, 20))
	for _, r := range rows {
		bare := "—"
		if len(r.bare) > 0 {
			bare = ms(pct(r.bare, 50))
		}
		fmt.Printf("| %s | %s | %s | %s | %.1f MiB |\n", r.lang, stat(r.first), bare, stat(r.cell), r.avail/(1<<20))
	}
	return nil
}

func checkTrivial(lang string, r *api.ExecuteResult) error {
	want := langTrivial[lang].want
	got := ""
	for _, o := range r.Outputs {
		switch {
		case o.Type == api.OutputExecuteResult:
			got, _ = o.Data["text/plain"].(string)
		case o.Type == api.OutputStream && o.Name == "stdout":
			got += o.Text
		}
	}
	if r.Status != api.StatusOK || strings.TrimSpace(got) != want {
		return fmt.Errorf("trivial cell: status %s (%s), shown %q, want %q", r.Status, r.Message, got, want)
	}
	return nil
}

// waitLangPool waits for lang's warm pool to hold its size, where there is one
// (--language-pools), as its metric tells.
func (b *bench) waitLangPool(ctx context.Context, lang string) error {
	kernel := api.KernelLanguage(lang)
	size := b.cfg.LanguagePoolSizes()[kernel] // none for "" and Python
	if size == 0 {
		return nil
	}
	series := fmt.Sprintf("cellbox_language_pool_size{language=%q}", kernel)
	deadline := time.Now().Add(3 * time.Minute)
	for time.Now().Before(deadline) {
		n, err := b.metric(ctx, series)
		if err != nil {
			return err
		}
		if int(n) >= size {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("the %s pool did not fill within 3 minutes", kernel)
}

// langIdle is the host's available memory that an idle session of lang takes, after one
// trivial cell (its language's kernel running beside the sandbox's Python kernel).
func (b *bench) langIdle(ctx context.Context, lang string, n int) (float64, int, error) {
	var ids []string
	defer func() {
		for _, id := range ids {
			b.c.DeleteSession(ctx, id)
		}
	}()
	before, err := b.settle(ctx, lang)
	if err != nil {
		return 0, 0, err
	}
	for range n {
		s, err := b.c.CreateSession(ctx, api.CreateSessionRequest{Language: lang})
		if err != nil {
			return 0, 0, err
		}
		ids = append(ids, s.ID)
		if _, err := b.c.Execute(ctx, s.ID, api.ExecuteRequest{Code: langTrivial[lang].code}); err != nil {
			return 0, 0, err
		}
	}
	after, err := b.settle(ctx, lang)
	if err != nil {
		return 0, 0, err
	}
	return (before - after) / float64(n), n, nil
}
