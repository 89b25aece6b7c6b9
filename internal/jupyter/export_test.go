package jupyter

// V1Frame frames a message as jupyter_server's serialize_msg_to_ws_v1 (wire_test.go), for
// the package's tests that speak to a real server.
var V1Frame = v1Frame
