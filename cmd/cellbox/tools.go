package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"

	"github.com/cellbox/cellbox/internal/config"
	"github.com/cellbox/cellbox/internal/tool"
)

func init() {
	register("tools", "print the tool definitions to hand a model (OpenAI, Anthropic or MCP shape)", toolsMain)
}

// toolsMain prints what GET /v1/tools answers, for the limits of the given settings.
func toolsMain(args []string) int {
	cfg := config.Default()
	fs := flag.NewFlagSet("tools", flag.ContinueOnError)
	format := fs.String("format", tool.FormatOpenAI, "openai (Chat Completions \"tools\") | anthropic (Messages \"tools\") | mcp (a tools/list result)")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "Usage: cellbox tools [--format openai|anthropic|mcp]\n\nThe descriptions state the limits of the settings given (--exec-timeout, --memory-mb;\nsee `cellbox serve -h`), so pass the server's.\n\nFlags:")
		fmt.Fprintf(os.Stderr, "  -format string\n    \t%s (default %q)\n", fs.Lookup("format").Usage, tool.FormatOpenAI)
	}
	cfg.Flags(fs)
	if err := config.Load(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		fmt.Fprintf(os.Stderr, "cellbox tools: %v\n", err)
		return exitUsage
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "cellbox tools: unexpected argument %q\n", fs.Arg(0))
		return exitUsage
	}
	opts := tool.Options{TimeoutS: cfg.ExecTimeout.Seconds(), MemoryMB: cfg.MemoryMB, SessionID: *format == tool.FormatMCP,
		Languages: config.SplitList(cfg.ToolLanguages)}
	v, err := tool.Format(tool.Definitions(opts), *format)
	if err != nil {
		fmt.Fprintf(os.Stderr, "cellbox tools: --format: %v\n", err)
		return exitUsage
	}
	b, _ := json.MarshalIndent(v, "", "  ")
	fmt.Printf("%s\n", b)
	return exitOK
}
