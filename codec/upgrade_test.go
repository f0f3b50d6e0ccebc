package codec

import (
	"bufio"
	"bytes"
	"io"
	"net/http"
	"strings"
	"testing"
)

// browserUpgrade is a typical upgrade request of a current browser.
const browserUpgrade = "GET /?v=1 HTTP/1.1\r\n" +
	"Host: edge.example.com\r\n" +
	"Connection: Upgrade\r\n" +
	"Pragma: no-cache\r\n" +
	"Cache-Control: no-cache\r\n" +
	"User-Agent: Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36\r\n" +
	"Upgrade: websocket\r\n" +
	"Origin: https://app.example.com\r\n" +
	"Sec-WebSocket-Version: 13\r\n" +
	"Accept-Encoding: gzip, deflate, br, zstd\r\n" +
	"Accept-Language: en-US,en;q=0.9\r\n" +
	"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n" +
	"Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n" +
	"\r\n"

func TestParseRequest(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		check func(t *testing.T, r *Request)
		size  int // expected head size if not len(in)
	}{
		{
			name: "browser upgrade",
			in:   browserUpgrade,
			check: func(t *testing.T, r *Request) {
				for _, f := range []struct{ got, want string }{
					{string(r.Method), "GET"},
					{string(r.RawPath), "/?v=1"},
					{string(r.Path), "/"},
					{string(r.Proto), "HTTP/1.1"},
					{string(r.Host), "edge.example.com"},
					{string(r.Upgrade), "websocket"},
					{string(r.Connection), "Upgrade"},
					{string(r.Key), "dGhlIHNhbXBsZSBub25jZQ=="},
					{string(r.Version), "13"},
					{string(r.Origin), "https://app.example.com"},
					{string(r.Extensions), "permessage-deflate; client_max_window_bits"},
				} {
					if f.got != f.want {
						t.Errorf("got %q, want %q", f.got, f.want)
					}
				}
				if !r.HasConnectionUpgrade || !r.HasUpgradeWebsocket || r.Repeated != 0 || r.Authorization != nil || r.Protocol != nil {
					t.Errorf("flags: %+v", r)
				}
			},
		},
		{
			name: "bare LF, leading empty lines, odd case and spacing",
			in:   "\r\n\nGET /ws HTTP/1.1\nhOsT:h\nUPGRADE: \t WebSocket \t\nconnection: keep-alive,  UPGRADE\nauthorization: Bearer abc\n\n",
			check: func(t *testing.T, r *Request) {
				if string(r.Path) != "/ws" || string(r.Host) != "h" || string(r.Upgrade) != "WebSocket" ||
					string(r.Authorization) != "Bearer abc" || !r.HasConnectionUpgrade || !r.HasUpgradeWebsocket {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name: "tokens across repeated headers",
			in:   "GET / HTTP/1.1\r\nConnection: keep-alive\r\nConnection: x, upgrade\r\nUpgrade: h2c\r\nUpgrade: foo, websocket\r\nHost: a\r\nHost: b\r\n\r\n",
			check: func(t *testing.T, r *Request) {
				if string(r.Connection) != "keep-alive" || string(r.Upgrade) != "h2c" || !r.HasConnectionUpgrade || !r.HasUpgradeWebsocket {
					t.Errorf("got %+v", r)
				}
				if string(r.Host) != "a" || r.Repeated != RepeatedHost {
					t.Errorf("host %q, repeated %b", r.Host, r.Repeated)
				}
			},
		},
		{
			name: "no upgrade token",
			in:   "GET / HTTP/1.1\r\nConnection: upgraded\r\nUpgrade: websockets\r\n\r\n",
			check: func(t *testing.T, r *Request) {
				if r.HasConnectionUpgrade || r.HasUpgradeWebsocket {
					t.Errorf("got %+v", r)
				}
			},
		},
		{
			name: "absolute form",
			in:   "GET http://edge.example.com:8080/ws?x=1 HTTP/1.1\r\nHost: edge.example.com:8080\r\n\r\n",
			check: func(t *testing.T, r *Request) {
				if string(r.Path) != "/ws" || string(r.RawPath) != "http://edge.example.com:8080/ws?x=1" {
					t.Errorf("path %q raw %q", r.Path, r.RawPath)
				}
			},
		},
		{
			name: "pipelined bytes after the head are not consumed",
			in:   "GET / HTTP/1.1\r\nHost: h\r\n\r\n\x81\x85",
			size: len("GET / HTTP/1.1\r\nHost: h\r\n\r\n"),
			check: func(t *testing.T, r *Request) {
				if string(r.Host) != "h" {
					t.Errorf("got %+v", r)
				}
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			size := tc.size
			if size == 0 {
				size = len(tc.in)
			}
			in := []byte(tc.in)
			r, n, err := ParseRequest(in, 0)
			if err != nil || n != size {
				t.Fatalf("ParseRequest = %d, %v; want %d, nil", n, err, size)
			}
			tc.check(t, &r)
			// Split input: every shorter prefix needs more, the head alone is enough.
			for i := range size {
				if _, n, err := ParseRequest(in[:i], 0); err != ErrNeedMore || n != 0 {
					t.Fatalf("prefix %d: %d, %v; want ErrNeedMore", i, n, err)
				}
			}
			if _, n, err := ParseRequest(in[:size], 0); err != nil || n != size {
				t.Fatalf("head alone: %d, %v", n, err)
			}
		})
	}
}

func TestParseRequestErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want error
	}{
		{name: "empty", in: "", want: ErrNeedMore},
		{name: "no terminator yet", in: "GET / HTTP/1.1\r\nHost: h\r\n", want: ErrNeedMore},
		{name: "CR only", in: "GET / HTTP/1.1\r\nHost: h\r\n\r", want: ErrNeedMore},
		{name: "no target", in: "GET HTTP/1.1\r\n\r\n", want: ErrBadRequest},
		{name: "two spaces", in: "GET  / HTTP/1.1\r\n\r\n", want: ErrBadRequest},
		{name: "extra field", in: "GET / HTTP/1.1 x\r\n\r\n", want: ErrBadRequest},
		{name: "bad proto", in: "GET / HTTP/11\r\n\r\n", want: ErrBadRequest},
		{name: "lower-case proto", in: "GET / http/1.1\r\n\r\n", want: ErrBadRequest},
		{name: "bad method", in: "G(T / HTTP/1.1\r\n\r\n", want: ErrBadRequest},
		{name: "control byte in target", in: "GET /\x01 HTTP/1.1\r\n\r\n", want: ErrBadRequest},
		{name: "header without colon", in: "GET / HTTP/1.1\r\nHost h\r\n\r\n", want: ErrBadRequest},
		{name: "empty header name", in: "GET / HTTP/1.1\r\n: h\r\n\r\n", want: ErrBadRequest},
		{name: "space before colon", in: "GET / HTTP/1.1\r\nHost : h\r\n\r\n", want: ErrBadRequest},
		{name: "obsolete folding", in: "GET / HTTP/1.1\r\nX-A: a\r\n b\r\n\r\n", want: ErrBadRequest},
		{name: "bare CR in value", in: "GET / HTTP/1.1\r\nX-A: a\rb\r\n\r\n", want: ErrBadRequest},
		{name: "NUL in value", in: "GET / HTTP/1.1\r\nX-A: a\x00b\r\n\r\n", want: ErrBadRequest},
		{name: "only empty lines", in: "\r\n\r\n", want: ErrNeedMore},
		{name: "cap reached without terminator", in: strings.Repeat("a", 64), max: 64, want: ErrHeaderTooLarge},
		{name: "one below the cap", in: strings.Repeat("a", 63), max: 64, want: ErrNeedMore},
		{name: "complete head over the cap", in: "GET / HTTP/1.1\r\nX-Pad: " + strings.Repeat("p", 40) + "\r\n\r\n", max: 64, want: ErrHeaderTooLarge},
		{name: "slowloris of empty lines", in: strings.Repeat("\r\n", 40), max: 64, want: ErrHeaderTooLarge},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, n, err := ParseRequest([]byte(tc.in), tc.max)
			if err != tc.want || n != 0 {
				t.Fatalf("ParseRequest = %d, %v; want 0, %v", n, err, tc.want)
			}
		})
	}
	t.Run("head of exactly the cap", func(t *testing.T) {
		head := "GET / HTTP/1.1\r\nX: " + strings.Repeat("p", 64-len("GET / HTTP/1.1\r\nX: \r\n\r\n")) + "\r\n\r\n"
		if len(head) != 64 {
			t.Fatalf("test head is %d bytes", len(head))
		}
		_, n, err := ParseRequest([]byte(head+"more bytes after"), 64)
		if err != nil || n != 64 {
			t.Fatalf("ParseRequest = %d, %v; want 64, nil", n, err)
		}
	})
}

func TestCheckUpgrade(t *testing.T) {
	valid := "GET /ws?token=x HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
	tests := []struct {
		name string
		req  string // without the final CRLF
		path string
		want int
	}{
		{name: "valid", req: valid, path: "/ws", want: 101},
		{name: "another path", req: valid, path: "/", want: 404},
		{name: "prefix of the path", req: strings.Replace(valid, "/ws?", "/wsx?", 1), path: "/ws", want: 404},
		{name: "POST on another path", req: strings.Replace(strings.Replace(valid, "GET", "POST", 1), "/ws?", "/admin?", 1), path: "/ws", want: 404},
		{name: "POST on the path", req: strings.Replace(valid, "GET", "POST", 1), path: "/ws", want: 400},
		{name: "plain GET", req: "GET /ws HTTP/1.1\r\nHost: h\r\n", path: "/ws", want: 400},
		{name: "HTTP/1.0", req: strings.Replace(valid, "HTTP/1.1", "HTTP/1.0", 1), path: "/ws", want: 400},
		{name: "HTTP/0.9", req: strings.Replace(valid, "HTTP/1.1", "HTTP/0.9", 1), path: "/ws", want: 400},
		{name: "no host", req: strings.Replace(valid, "Host: h\r\n", "", 1), path: "/ws", want: 400},
		{name: "two hosts", req: valid + "Host: h2\r\n", path: "/ws", want: 400},
		{name: "no upgrade", req: strings.Replace(valid, "Upgrade: websocket\r\n", "", 1), path: "/ws", want: 400},
		{name: "upgrade to h2c", req: strings.Replace(valid, "Upgrade: websocket", "Upgrade: h2c", 1), path: "/ws", want: 400},
		{name: "connection keep-alive", req: strings.Replace(valid, "Connection: Upgrade", "Connection: keep-alive", 1), path: "/ws", want: 400},
		{name: "connection list, mixed case", req: strings.Replace(strings.Replace(valid, "Connection: Upgrade", "Connection: keep-alive, uPgRaDe", 1), "websocket", "WebSocket", 1), path: "/ws", want: 101},
		{name: "version 8", req: strings.Replace(valid, "Version: 13", "Version: 8", 1), path: "/ws", want: 426},
		{name: "version 13, 8", req: strings.Replace(valid, "Version: 13", "Version: 13, 8", 1), path: "/ws", want: 426},
		{name: "no version", req: strings.Replace(valid, "Sec-WebSocket-Version: 13\r\n", "", 1), path: "/ws", want: 400},
		{name: "two versions", req: valid + "Sec-WebSocket-Version: 13\r\n", path: "/ws", want: 400},
		{name: "no key", req: strings.Replace(valid, "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "", 1), path: "/ws", want: 400},
		{name: "key of 17 bytes", req: strings.Replace(valid, "dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZSBub25jZXg=", 1), path: "/ws", want: 400},
		{name: "key not base64", req: strings.Replace(valid, "dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZSBub25jZ!==", 1), path: "/ws", want: 400},
		{name: "key with stray bits", req: strings.Replace(valid, "dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZSBub25jZR==", 1), path: "/ws", want: 400},
		{name: "short key", req: strings.Replace(valid, "dGhlIHNhbXBsZSBub25jZQ==", "dGhlIHNhbXBsZSBub25j", 1), path: "/ws", want: 400},
		{name: "two keys", req: valid + "Sec-WebSocket-Key: AQIDBAUGBwgJCgsMDQ4PEA==\r\n", path: "/ws", want: 400},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, _, err := ParseRequest([]byte(tc.req+"\r\n"), 0)
			if err != nil {
				t.Fatal(err)
			}
			if got := CheckUpgrade(&r, tc.path); got != tc.want {
				t.Fatalf("CheckUpgrade = %d, want %d", got, tc.want)
			}
		})
	}
	t.Run("zero request", func(t *testing.T) {
		if got := CheckUpgrade(&Request{}, ""); got != 400 {
			t.Fatalf("CheckUpgrade = %d, want 400", got)
		}
	})
}

func TestAppendAccept(t *testing.T) {
	// RFC 6455 section 4.2.2 (and 1.3): the example key and its accept value.
	got := AppendAccept([]byte("x"), []byte("dGhlIHNhbXBsZSBub25jZQ=="))
	want := "xHTTP/1.1 101 Switching Protocols\r\n" +
		"Upgrade: websocket\r\n" +
		"Connection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
	if string(got) != want {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	// A key longer than the stack buffer takes the streaming path.
	long := bytes.Repeat([]byte("k"), 100)
	a := AppendAccept(nil, long)
	b := AppendAccept(nil, long)
	if !bytes.Equal(a, b) || bytes.Contains(a, []byte("s3pPLMBiTxaQ9kYGzzhZRbK+xOo=")) {
		t.Fatalf("long key: %q", a)
	}
}

func TestAppendHTTPError(t *testing.T) {
	tests := []struct {
		status int
		body   string
		header map[string]string
	}{
		{status: 400, body: "Bad Request\n"},
		{status: 401, body: "Unauthorized\n", header: map[string]string{"Www-Authenticate": "Bearer"}},
		{status: 403, body: "Forbidden\n"},
		{status: 404, body: "Not Found\n"},
		{status: 426, body: "Upgrade Required\n", header: map[string]string{"Sec-Websocket-Version": "13", "Upgrade": "websocket"}},
		{status: 431, body: "Request Header Fields Too Large\n"},
		{status: 599, body: "Error\n"},
	}
	for _, tc := range tests {
		t.Run(http.StatusText(tc.status), func(t *testing.T) {
			raw := AppendHTTPError(nil, tc.status)
			resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(raw)), nil)
			if err != nil {
				t.Fatalf("%q: %v", raw, err)
			}
			body, err := io.ReadAll(resp.Body)
			if err != nil || string(body) != tc.body || resp.StatusCode != tc.status || !resp.Close ||
				resp.ContentLength != int64(len(tc.body)) || resp.Header.Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Fatalf("%q: status %d, body %q, err %v", raw, resp.StatusCode, body, err)
			}
			for k, v := range tc.header {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
			if tc.status != 426 && resp.Header.Get("Sec-WebSocket-Version") != "" {
				t.Errorf("Sec-WebSocket-Version on %d", tc.status)
			}
		})
	}
	golden := "HTTP/1.1 404 Not Found\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: 10\r\nConnection: close\r\n\r\nNot Found\n"
	if got := string(AppendHTTPError(nil, 404)); got != golden {
		t.Fatalf("got %q\nwant %q", got, golden)
	}
}

// TestParseRequestAgreesWithNetHTTP checks the fields we extract against the
// standard library's parser on the valid requests of the tables above.
func TestParseRequestAgreesWithNetHTTP(t *testing.T) {
	in := browserUpgrade
	r, _, err := ParseRequest([]byte(in), 0)
	if err != nil {
		t.Fatal(err)
	}
	std, err := http.ReadRequest(bufio.NewReader(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	if std.Method != string(r.Method) || std.URL.Path != string(r.Path) || std.RequestURI != string(r.RawPath) ||
		std.Host != string(r.Host) || std.Header.Get("Sec-WebSocket-Key") != string(r.Key) {
		t.Fatalf("net/http %+v\nours %+v", std, r)
	}
}

func BenchmarkParseRequest(b *testing.B) {
	in := []byte(browserUpgrade)
	b.ReportAllocs()
	b.SetBytes(int64(len(in)))
	for b.Loop() {
		r, n, err := ParseRequest(in, 0)
		if err != nil || n != len(in) || CheckUpgrade(&r, "/") != 101 {
			b.Fatal(n, err)
		}
	}
}

func BenchmarkAppendAccept(b *testing.B) {
	key := []byte("dGhlIHNhbXBsZSBub25jZQ==")
	dst := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		dst = AppendAccept(dst[:0], key)
	}
}

func TestIsTokenChar(t *testing.T) {
	for c := range 256 {
		want := c < 128 && (c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", byte(c)) >= 0)
		if got := isTokenChar(byte(c)); got != want {
			t.Errorf("isTokenChar(%#x) = %v, want %v", c, got, want)
		}
	}
}
