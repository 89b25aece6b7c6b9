package sandbox

import (
	"io"
	"os"
	"sync"
)

// PipeConn joins the guest's stdout (reads) and stdin (writes) into the byte stream a
// Sandbox's Conn returns. Close closes both, once.
func PipeConn(stdout, stdin *os.File) io.ReadWriteCloser {
	return &pipeConn{r: stdout, w: stdin}
}

type pipeConn struct {
	r, w *os.File
	once sync.Once
}

func (c *pipeConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *pipeConn) Write(p []byte) (int, error) { return c.w.Write(p) }
func (c *pipeConn) Close() error {
	c.once.Do(func() {
		c.w.Close()
		c.r.Close()
	})
	return nil
}
