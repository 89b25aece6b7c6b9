// Command openai-tools answers a question with an OpenAI model that runs Python in a
// cellbox session: OpenAI function calling with one tool, python(code), carried out by the
// cellbox Go SDK. It is an example to copy; it imports only the SDKs and the standard library.
//
//	openai-tools -file data.csv "Which column best predicts accidents? Plot it."
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
	"github.com/openai/openai-go/v3"
)

const (
	maxSteps = 10    // model calls per question
	maxText  = 20000 // bytes of one tool result's text; past it the middle is cut
)

const system = "Answer the user's question. Use the python tool to read their files and to compute; " +
	"base your answer on what the code shows."

var pythonTool = openai.ChatCompletionFunctionTool(openai.FunctionDefinitionParam{
	Name: "python",
	Description: openai.String("Run Python 3 code in a stateful IPython session, like a notebook cell: " +
		"variables, imports and functions persist between calls. numpy, pandas, matplotlib and scipy are installed; " +
		"there is no network access. The user's files are in /mnt/data; save files you make there. " +
		"The value of the last expression is shown; print() anything else. " +
		"Show plots with plt.show(): each figure comes back to you as an image."),
	Parameters: openai.FunctionParameters{
		"type": "object",
		"properties": map[string]any{
			"code": map[string]any{"type": "string", "description": "The Python code to run."},
		},
		"required": []string{"code"},
	},
})

func main() {
	server := flag.String("server", envOr("CELLBOX_SERVER", "http://127.0.0.1:8080"), "cellbox server URL")
	model := flag.String("model", "gpt-5", "OpenAI model")
	file := flag.String("file", "", "a local file to upload to /mnt/data first")
	flag.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: openai-tools [flags] question...\n\nOPENAI_API_KEY and OPENAI_BASE_URL configure the model API.")
		flag.PrintDefaults()
	}
	flag.Parse()
	if flag.NArg() == 0 {
		flag.Usage()
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()

	answer, err := run(ctx, client.New(*server), openai.NewClient(), *model, strings.Join(flag.Args(), " "), *file, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "openai-tools:", err)
		os.Exit(1)
	}
	fmt.Println(answer)
}

// run answers question in a new session, uploading file (if not "") to /mnt/data first.
// It writes each step's code and status to progress and deletes the session at the end.
func run(ctx context.Context, cb *client.Client, ai openai.Client, model, question, file string, progress io.Writer) (string, error) {
	s, err := cb.CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		return "", fmt.Errorf("create session: %w", err)
	}
	defer cb.DeleteSession(context.WithoutCancel(ctx), s.ID)

	if file != "" {
		f, err := os.Open(file)
		if err != nil {
			return "", err
		}
		info, err := cb.UploadFile(ctx, s.ID, filepath.Base(file), f)
		f.Close()
		if err != nil {
			return "", fmt.Errorf("upload %s: %w", file, err)
		}
		question += "\n\nMy file is at " + info.Path + "."
	}

	params := openai.ChatCompletionNewParams{
		Model:    model,
		Tools:    []openai.ChatCompletionToolUnionParam{pythonTool},
		Messages: []openai.ChatCompletionMessageParamUnion{openai.SystemMessage(system), openai.UserMessage(question)},
	}
	for range maxSteps {
		resp, err := ai.Chat.Completions.New(ctx, params)
		if err != nil {
			return "", err
		}
		if len(resp.Choices) == 0 {
			return "", fmt.Errorf("the model gave no answer")
		}
		msg := resp.Choices[0].Message
		if len(msg.ToolCalls) == 0 {
			return msg.Content, nil
		}
		params.Messages = append(params.Messages, msg.ToParam())

		// Tool messages take text only, so the images of all calls follow in one user message.
		var images []openai.ChatCompletionContentPartUnionParam
		for _, call := range msg.ToolCalls {
			var args struct{ Code string }
			if call.Function.Name != "python" || json.Unmarshal([]byte(call.Function.Arguments), &args) != nil {
				params.Messages = append(params.Messages, openai.ToolMessage(`Error: call the python tool with {"code": "..."}.`, call.ID))
				continue
			}
			fmt.Fprintf(progress, "--- python\n%s\n", strings.TrimRight(args.Code, "\n"))
			res, err := cb.Execute(ctx, s.ID, api.ExecuteRequest{Code: args.Code})
			if err != nil {
				return "", fmt.Errorf("execute: %w", err)
			}
			text, pngs := render(res)
			fmt.Fprintf(progress, "--- %s in %d ms, %d image(s)\n", res.Status, res.DurationMS, len(pngs))
			params.Messages = append(params.Messages, openai.ToolMessage(text, call.ID))
			if len(pngs) > 0 {
				images = append(images, openai.TextContentPart("Images from tool call "+call.ID+" (python):"))
			}
			for _, png := range pngs {
				images = append(images, openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{
					URL: "data:image/png;base64," + png,
				}))
			}
		}
		if len(images) > 0 {
			params.Messages = append(params.Messages, openai.UserMessage(images))
		}
	}
	return "", fmt.Errorf("no answer after %d steps", maxSteps)
}

// render writes an execution's result for the model: its output in order, the traceback,
// the status when it is not ok and the files the code changed. It returns the PNG images
// (base64) the code showed apart.
func render(res *api.ExecuteResult) (text string, pngs []string) {
	var b strings.Builder
	stream := "stdout"
	for _, o := range res.Outputs {
		switch o.Type {
		case api.OutputStream:
			if o.Name != stream {
				fmt.Fprintf(&b, "[%s]\n", o.Name) // mark where stdout and stderr alternate
				stream = o.Name
			}
			b.WriteString(o.Text)
		case api.OutputDisplayData, api.OutputExecuteResult:
			if png, ok := o.Data["image/png"].(string); ok {
				pngs = append(pngs, png)
				fmt.Fprintf(&b, "[image %d: image/png, attached]\n", len(pngs))
			} else if s, ok := o.Data["text/plain"].(string); ok {
				b.WriteString(s + "\n")
			}
		case api.OutputError:
			b.WriteString(strings.Join(o.Traceback, "\n") + "\n")
		}
	}
	if res.Status != api.StatusOK {
		fmt.Fprintf(&b, "Status: %s\n", strings.TrimSuffix(res.Status+": "+res.Message, ": "))
	}
	for i, f := range res.Files {
		if i == 0 {
			b.WriteString("Files changed:\n")
		}
		fmt.Fprintf(&b, "- %s (%s, %d bytes)\n", f.Path, f.Change, f.Size)
	}
	text = strings.TrimSpace(b.String())
	if len(text) > maxText {
		text = text[:maxText/2] + "\n[... output cut ...]\n" + text[len(text)-maxText/2:]
	}
	if text == "" {
		text = "(no output: print() what you want to see)"
	}
	return text, pngs
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}
