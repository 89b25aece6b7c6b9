package jupyter

import "time"

func init() {
	// The tests' servers take as long as a test to write one message: what closes a
	// websocket in them is the defence under test (TestKernelHolds: a client 64 MiB behind),
	// never a slow machine's write that ran out of time.
	writeTimeout = 10 * time.Minute
}

// V1Frame frames a message as jupyter_server's serialize_msg_to_ws_v1 (wire_test.go), for
// the package's tests that speak to a real server.
var V1Frame = v1Frame
