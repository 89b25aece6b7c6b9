package client_test

import (
	"strings"
	"testing"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
)

// TestSessionTools: a tool defined in a session is listed and called, whole and streamed;
// bad arguments are invalid_argument; one the code proposed is saved by the caller, is in
// the library, loads into another session, and is deleted.
func TestSessionTools(t *testing.T) {
	c := newClient(t)
	ctx := t.Context()
	id := newSession(t, c)
	code := "from cellbox import tool\n\n" +
		"@tool(save=True)\n" +
		"def client_area(w: float, h: float) -> float:\n" +
		"    \"\"\"Area of a rectangle.\"\"\"\n" +
		"    print('computing', flush=True)\n" +
		"    return w * h\n"
	if r, err := c.Execute(ctx, id, api.ExecuteRequest{Code: code}); err != nil || r.Status != api.StatusOK {
		t.Fatalf("define: %+v, %v", r, err)
	}
	t.Cleanup(func() { c.DeleteSavedTool(ctx, "client_area") })
	tools, err := c.SessionTools(ctx, id)
	if err != nil || len(tools) != 1 || tools[0].Name != "client_area" || tools[0].Saved || !tools[0].SaveProposed || tools[0].InputSchema["type"] != "object" {
		t.Fatalf("tools %+v, %v", tools, err)
	}
	if _, err := c.SaveTool(ctx, id, "client_area", api.SaveToolRequest{Source: "def client_area(): pass"}); client.Code(err) != api.CodeFailedPrecondition {
		t.Errorf("save with another source: %v", err)
	}
	if st, err := c.SaveTool(ctx, id, "client_area", api.SaveToolRequest{Source: tools[0].Source}); err != nil || st.Name != "client_area" || st.Source != tools[0].Source {
		t.Fatalf("save: %+v, %v", st, err)
	}
	args := api.ToolCallRequest{Arguments: []byte(`{"w": 3, "h": 4.5}`)}
	res, err := c.CallTool(ctx, id, "client_area", args, nil)
	if err != nil || res.Status != api.StatusOK || !res.HasValue || res.Value != 13.5 || stdout(&api.ExecuteResult{Outputs: res.Outputs}) != "computing\n" {
		t.Fatalf("call: %+v, %v", res, err)
	}
	var streamed []api.Output
	res, err = c.CallTool(ctx, id, "client_area", args, func(o api.Output) { streamed = append(streamed, o) })
	if err != nil || res.Value != 13.5 || len(streamed) != 1 || streamed[0].Text != "computing\n" {
		t.Fatalf("streamed call: %+v, %d outputs, %v", res, len(streamed), err)
	}
	_, err = c.CallTool(ctx, id, "client_area", api.ToolCallRequest{Arguments: []byte(`{"w": "wide", "h": 1}`)}, nil)
	if !client.IsInvalidArgument(err) || !strings.Contains(err.Error(), "/w") {
		t.Errorf("bad arguments: %v", err)
	}
	if _, err = c.CallTool(ctx, id, "nope", args, func(api.Output) {}); !client.IsNotFound(err) {
		t.Errorf("unknown tool, streamed: %v", err)
	}

	saved, err := c.SavedTools(ctx)
	if err != nil || !hasSaved(saved, "client_area") {
		t.Fatalf("saved tools %+v, %v", saved, err)
	}
	one, err := c.SavedTool(ctx, "client_area")
	if err != nil || !strings.Contains(one.Source, "def client_area") {
		t.Fatalf("saved tool %+v, %v", one, err)
	}
	other := newSession(t, c)
	loaded, err := c.LoadTools(ctx, other, "client_area")
	if err != nil || len(loaded) != 1 || loaded[0].Name != "client_area" {
		t.Fatalf("load: %+v, %v", loaded, err)
	}
	if res, err := c.CallTool(ctx, other, "client_area", args, nil); err != nil || res.Value != 13.5 {
		t.Fatalf("call the loaded tool: %+v, %v", res, err)
	}
	if err := c.DeleteSavedTool(ctx, "client_area"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.SavedTool(ctx, "client_area"); !client.IsNotFound(err) {
		t.Errorf("after delete: %v", err)
	}
}

func hasSaved(tools []api.SavedTool, name string) bool {
	for _, t := range tools {
		if t.Name == name {
			return true
		}
	}
	return false
}
