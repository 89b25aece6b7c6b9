package jupyter

import (
	"context"
	"encoding/json"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/internal/session"
)

// executeContent is an execute_request's content.
type executeContent struct {
	Code            string            `json:"code"`
	Silent          bool              `json:"silent"`
	StoreHistory    *bool             `json:"store_history"`
	UserExpressions map[string]string `json:"user_expressions"`
	StopOnError     *bool             `json:"stop_on_error"`
	AllowStdin      bool              `json:"allow_stdin"`
}

// statusNames are the errors a cell that did not end on its own is told as, when the
// kernel sent none of its own (the kernel died).
var statusNames = map[string]string{
	api.StatusTimeout:     "TimeoutError",
	api.StatusInterrupted: "KeyboardInterrupt",
	api.StatusOOM:         "MemoryError",
	api.StatusCrashed:     "DeadKernelError",
}

// execute runs an execute_request's code in the session: execute_input, the outputs as
// they come (none when silent), execute_reply. It reports whether the cell failed, and
// whether queued cells are to be aborted for it (stop_on_error, true unless said).
func (k *kernel) execute(ctx context.Context, r request) (failed, stop bool) {
	var c executeContent
	if err := json.Unmarshal(r.m.Content, &c); err != nil {
		k.reply(r, errorContent("ValueError", "the execute_request's content is not valid: code must be a string, silent, store_history, "+
			"allow_stdin and stop_on_error booleans, user_expressions an object of strings"))
		return true, false
	}
	stop = c.StopOnError == nil || *c.StopOnError
	noHistory := c.Silent || (c.StoreHistory != nil && !*c.StoreHistory)
	k.mu.Lock()
	count := k.count
	k.mu.Unlock()
	if !noHistory {
		count++
	}
	if !c.Silent {
		k.publish("execute_input", r.m, map[string]any{"code": c.Code, "execution_count": count})
	}
	var lastErr *api.Output
	onOutput := func(o api.Output) {
		if o.Type == api.OutputError {
			lastErr = &o
		}
		if !c.Silent {
			if t, content := iopub(o); t != "" {
				k.publish(t, r.m, content)
			}
		}
	}
	if k.spec.lang != api.LanguagePython {
		c.UserExpressions = nil // they are Python's: none are evaluated in another language
	}
	req := api.ExecuteRequest{Code: c.Code, Language: k.spec.lang, NoHistory: noHistory, UserExpressions: c.UserExpressions,
		DisplayUpdates: true, TimeoutS: k.h.opts.CellTimeout.Seconds()}
	hooks := session.ExecuteHooks{OnOutput: onOutput}
	if c.AllowStdin && !c.Silent {
		hooks.OnInput = func(ctx context.Context, prompt string, password bool) (string, error) {
			return k.input(ctx, r, prompt, password)
		}
	}
	res, err := k.h.s.ExecuteInteractive(ctx, k.sid, req, hooks)
	if err != nil {
		reply := k.errorReply(err)
		if !c.Silent {
			k.publish("error", r.m, map[string]any{"ename": reply["ename"], "evalue": reply["evalue"], "traceback": []string{reply["evalue"].(string)}})
		}
		reply["execution_count"] = count
		reply["user_expressions"] = map[string]any{}
		k.reply(r, reply)
		return true, stop
	}
	k.mu.Lock()
	k.count = res.ExecutionCount
	k.mu.Unlock()
	ux := map[string]any{}
	for key, o := range res.UserExpressions {
		if o.Type == api.OutputError {
			ux[key] = map[string]any{"status": "error", "ename": o.EName, "evalue": o.EValue, "traceback": nonNil(o.Traceback)}
		} else {
			ux[key] = map[string]any{"status": "ok", "data": o.Data, "metadata": orEmptyMap(o.Metadata)}
		}
	}
	if res.Message != "" && !c.Silent {
		k.publish("stream", r.m, map[string]any{"name": "stderr", "text": "[cellbox: " + res.Message + "]\n"})
	}
	if res.Status == api.StatusOK {
		k.reply(r, map[string]any{"status": "ok", "execution_count": res.ExecutionCount, "user_expressions": ux, "payload": []any{}})
		return false, stop
	}
	if res.Status != api.StatusError {
		if lastErr == nil {
			lastErr = &api.Output{Type: api.OutputError, EName: statusNames[res.Status], EValue: res.Message, Traceback: []string{res.Message}}
			if !c.Silent {
				_, content := iopub(*lastErr)
				k.publish("error", r.m, content)
			}
		}
	}
	if lastErr == nil {
		lastErr = &api.Output{Type: api.OutputError, EName: "Error", EValue: res.Status}
	}
	k.reply(r, map[string]any{"status": "error", "execution_count": res.ExecutionCount, "ename": lastErr.EName,
		"evalue": lastErr.EValue, "traceback": nonNil(lastErr.Traceback), "user_expressions": ux, "payload": []any{}})
	return true, stop
}

// iopub is the iopub message of an output: its type and content ("" for none).
func iopub(o api.Output) (string, map[string]any) {
	switch o.Type {
	case api.OutputStream:
		return "stream", map[string]any{"name": o.Name, "text": o.Text}
	case api.OutputDisplayData, api.OutputUpdateDisplay:
		c := map[string]any{"data": orEmptyMap(o.Data), "metadata": orEmptyMap(o.Metadata), "transient": map[string]any{}}
		if o.DisplayID != "" {
			c["transient"] = map[string]any{"display_id": o.DisplayID}
		}
		return o.Type, c
	case api.OutputExecuteResult:
		return "execute_result", map[string]any{"execution_count": o.ExecutionCount, "data": orEmptyMap(o.Data), "metadata": orEmptyMap(o.Metadata)}
	case api.OutputError:
		return "error", map[string]any{"ename": o.EName, "evalue": o.EValue, "traceback": nonNil(o.Traceback)}
	case api.OutputClear:
		return "clear_output", map[string]any{"wait": o.Wait}
	}
	return "", nil
}

func orEmptyMap(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
