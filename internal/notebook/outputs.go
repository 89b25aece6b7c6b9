package notebook

import (
	"slices"

	"github.com/cellbox/cellbox/api"
)

// displays is what a run keeps to apply outputs as nbclient does: where each display_id
// is shown, and a clear_output that waits for the cell's next output.
type displays struct {
	shown     map[string][]shown // display_id → the outputs that show it
	clearNext bool
}

// shown is the i'th output of a cell.
type shown struct {
	c *cell
	i int
}

// add applies a cell's outputs (api.Output, from an execution with DisplayUpdates) to it,
// in order. An update_display_data replaces the data and metadata of every earlier output
// of the notebook with its display_id, and so does a new display_data with one, which is
// then shown too; clear_output clears the cell's outputs, with wait just before its next
// output. Consecutive stream outputs of the same name are one, as Jupyter shows them.
func (d *displays) add(c *cell, outs []api.Output) {
	for _, o := range outs {
		switch o.Type {
		case api.OutputClear:
			if o.Wait {
				d.clearNext = true
			} else {
				d.clear(c)
			}
			continue
		case api.OutputUpdateDisplay:
			d.update(o)
			continue
		}
		out := nbOutput(o)
		if out == nil {
			continue // a type of a later API version
		}
		if d.clearNext {
			d.clear(c)
		}
		if o.DisplayID != "" && (o.Type == api.OutputDisplayData || o.Type == api.OutputExecuteResult) {
			d.update(o)
			if d.shown == nil {
				d.shown = map[string][]shown{}
			}
			d.shown[o.DisplayID] = append(d.shown[o.DisplayID], shown{c, len(c.outputs)})
		}
		if n := len(c.outputs); o.Type == api.OutputStream && n > 0 &&
			c.outputs[n-1]["output_type"] == api.OutputStream && c.outputs[n-1]["name"] == out["name"] {
			c.outputs[n-1]["text"] = c.outputs[n-1]["text"].(string) + o.Text
			continue
		}
		c.outputs = append(c.outputs, out)
	}
}

// clear empties c's outputs and forgets the displays they showed.
func (d *displays) clear(c *cell) {
	c.outputs = []map[string]any{}
	d.clearNext = false
	for id, s := range d.shown {
		d.shown[id] = slices.DeleteFunc(s, func(s shown) bool { return s.c == c })
	}
}

// update puts o's data and metadata in every output shown for its display_id.
func (d *displays) update(o api.Output) {
	for _, s := range d.shown[o.DisplayID] {
		s.c.outputs[s.i]["data"] = orEmpty(o.Data)
		s.c.outputs[s.i]["metadata"] = orEmpty(o.Metadata)
	}
}

// nbOutput is o as an nbformat 4 output (nil for a type it does not have). A display_id
// is not kept: nbformat keeps it out of notebooks (it is transient).
func nbOutput(o api.Output) map[string]any {
	switch o.Type {
	case api.OutputStream:
		name := o.Name
		if name == "" {
			name = "stdout"
		}
		return map[string]any{"output_type": o.Type, "name": name, "text": o.Text}
	case api.OutputDisplayData:
		return map[string]any{"output_type": o.Type, "data": orEmpty(o.Data), "metadata": orEmpty(o.Metadata)}
	case api.OutputExecuteResult:
		var count any // null, unless the kernel counted it
		if o.ExecutionCount > 0 {
			count = o.ExecutionCount
		}
		return map[string]any{"output_type": o.Type, "data": orEmpty(o.Data), "metadata": orEmpty(o.Metadata), "execution_count": count}
	case api.OutputError:
		tb := o.Traceback
		if tb == nil {
			tb = []string{}
		}
		return map[string]any{"output_type": o.Type, "ename": o.EName, "evalue": o.EValue, "traceback": tb}
	}
	return nil
}

func orEmpty(m map[string]any) map[string]any {
	if m == nil {
		return map[string]any{}
	}
	return m
}
