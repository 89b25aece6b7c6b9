package client_test

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/cellbox/cellbox/api"
	"github.com/cellbox/cellbox/client"
)

// A session: upload a file, run code that streams its output, download what it made.
func Example() {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:8080")
	s, err := c.CreateSession(ctx, api.CreateSessionRequest{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return
	}
	defer c.DeleteSession(context.WithoutCancel(ctx), s.ID)

	c.UploadFile(ctx, s.ID, "data.csv", strings.NewReader("a,b\n1,2\n"))
	res, err := c.ExecuteStream(ctx, s.ID, api.ExecuteRequest{
		Code: "import pandas as pd\ndf = pd.read_csv('data.csv')\ndf.to_json('out.json')\nprint(df.a.sum())",
	}, func(o api.Output) {
		fmt.Print(o.Text) // stdout and stderr as they are written
	})
	switch {
	case client.IsNotFound(err):
		fmt.Fprintln(os.Stderr, "the session ended")
		return
	case err != nil:
		fmt.Fprintln(os.Stderr, err)
		return
	case res.Status != api.StatusOK:
		fmt.Fprintln(os.Stderr, "the code failed:", res.Status, res.Message)
	}
	for _, f := range res.Files {
		if f.Change != api.ChangeDeleted {
			c.DownloadFileTo(ctx, s.ID, f.Path, os.Stdout)
		}
	}
}
