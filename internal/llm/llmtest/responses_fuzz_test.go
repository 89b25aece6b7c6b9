package llmtest

import "testing"

// FuzzResponsesDecode: the Responses stand-in's decoder takes any body without panicking,
// and what it takes decodes into messages that alternate as llm.Message expects.
func FuzzResponsesDecode(f *testing.F) {
	const png1x1 = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	f.Add(`{"model":"m","input":"hi"}`)
	f.Add(`{"model":"m","input":[{"role":"user","content":[{"type":"input_text","text":"a"}]},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":[{"type":"input_image","image_url":"data:image/png;base64,` + png1x1 + `"}]},{"role":"user","content":"b"}]}`)
	f.Add(`{"model":"m","input":[{"type":"function_call_output","call_id":"c","output":null}],"tools":[{"type":"function","name":"f","strict":false,"parameters":{"type":"object"}}],"tool_choice":{"type":"function","name":"f"}}`)
	f.Add(`{"model":"m","input":[{"role":"assistant","content":null}],"store":false}`)
	f.Fuzz(func(t *testing.T, body string) {
		r, err := responsesAPI{}.decode([]byte(body))
		if err != nil {
			return
		}
		for i, m := range r.Messages {
			if len(m.ToolResults) > 0 && (i == 0 || len(r.Messages[i-1].ToolCalls) == 0) {
				t.Errorf("%s: results in message %d follow no calls: %+v", body, i, r.Messages)
			}
		}
	})
}
