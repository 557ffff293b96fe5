package proxy

// What a request reserves from the Policy, so that a memory bulkhead in
// front of the proxy bounds what requests really hold. The reservation is
// made on admission, before anything is known of the response, and a
// response body the proxy buffers is added when its headers arrive (see
// Config.Reserve).
const (
	// RequestOverheadBytes is the fixed part of every reservation: what one
	// request costs the proxy whatever its bodies, in Go heap and stacks.
	//
	// Measured by TestRequestOverheadBytes: 200 requests held at an
	// upstream, once directly and once through the proxy, the live heap
	// after a full collection plus the stacks in use compared with the idle
	// state. The proxy's share per request was 17–29 KiB while the upstream
	// had not answered (two connections with their buffers, the handler's
	// goroutine, the exchange, fasthttp's request context), and 57–72 KiB
	// while streaming a large response to a client that stopped reading:
	// the same plus the 32 KiB buffer that io.Copy allocates when fasthttp
	// hands the body to the connection's ReadFrom, and the stream's state.
	// 96 KiB covers the larger with a third to spare, for what the
	// measurement's noise and other platforms' stacks may add. The kernel's
	// socket buffers are not Go memory and are not counted.
	RequestOverheadBytes = 96 << 10

	// UnknownBodyBytes is the weight of a request body whose length is not
	// declared (chunked). The proxy streams such a body and holds little of
	// it, but the service behind holds it whole, and the bulkhead is there
	// for both; 64 KiB is a typical JSON or form upload, and a client that
	// sends more should declare it.
	UnknownBodyBytes = 64 << 10

	// ClientConnBytes is the most a client connection costs the proxy
	// outside any reservation, in Go heap and stacks: what a flood of
	// connections holds beside the memory bulkhead, and what
	// LOOMGATE_MAX_CONNS=auto divides the memory it gives connections by.
	// Measured by TestClientConnBytes, the difference per connection
	// between 300 held through the proxy and 300 held against a bare
	// listener: 2.6 KiB open and silent (its first bytes watched), 19 KiB
	// kept alive after a request (its goroutine, with the stack its request
	// grew), 17 KiB with its request waiting in the queue (which reserves
	// no bytes), and 25 KiB for an HTTP/2 connection with no stream (Go's
	// server's two goroutines, its framer and HPACK tables, and the
	// guard's); 32 KiB covers the largest with a quarter to spare. An
	// HTTP/2 stream is reserved on its own. The kernel's socket buffers are
	// not Go memory and are not counted.
	ClientConnBytes = 32 << 10
)

// RequestBytes is the reservation of a request whose body is declared as
// contentLength bytes (-1 when unknown): RequestOverheadBytes plus the body,
// or plus UnknownBodyBytes. It is the usual Config.Reserve.
//
// The declared length is the right weight even for a body the proxy streams
// rather than buffers: the service behind reads it whole, and the bulkhead
// protects the service's memory as much as the proxy's.
func RequestBytes(contentLength int) int64 {
	if contentLength < 0 {
		return RequestOverheadBytes + UnknownBodyBytes
	}
	return RequestOverheadBytes + int64(contentLength)
}
