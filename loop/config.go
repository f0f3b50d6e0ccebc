package loop

import (
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/openengine/edge/auth"
	"golang.org/x/sys/unix"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strings"
	"time"
)

// Config configures the gateway's listeners and per-connection limits. Zero
// values mean the documented defaults (the bracketed numbers of CONTRACT.md).
type Config struct {
	// Listen is the WebSocket listener address [127.0.0.1:8080].
	Listen string
	// NDJSONListen, when set, is the address of an NDJSON-over-TCP listener on
	// the same loops (CONTRACT.md section 1.2) [off].
	NDJSONListen string
	// WSPath is the only path that upgrades [/]; others get 404.
	WSPath string
	// MaxConns caps the connections open at once; an upgrade beyond it gets
	// 503 with Retry-After (an NDJSON connection is closed) (CONTRACT.md
	// section 11.1). [DefaultMaxConns(): the open-file limit minus 128]
	MaxConns int
	// MaxConnsPerIP caps the connections open at once from one client
	// address. [0: no limit]
	MaxConnsPerIP int
	// AllowOrigins lists the browser origins allowed besides the request's
	// own host ("scheme://host[:port]", or "*" for any); other Origins get
	// 403 (CONTRACT.md section 11.2). [none]
	AllowOrigins []string
	// Auth, when set, authenticates every WebSocket upgrade: a missing or
	// invalid bearer token gets 401 (CONTRACT.md section 11.3). [nil: off]
	Auth auth.Verifier
	// AuthQueryParam names a query parameter that may carry the token
	// instead of the Authorization header (browsers cannot set headers on
	// a WebSocket). [empty: header only]
	AuthQueryParam string
	// RateLimit is the messages per second a connection may send; a request
	// over it gets RATE_LIMITED (CONTRACT.md section 11.4). [0: off]
	RateLimit int
	// RateBurst is the burst above RateLimit. [2 x RateLimit]
	RateBurst int
	// RateCloseAfter is how many refusals in a row close the connection
	// with 1008 "rate limit exceeded". [1000]
	RateCloseAfter int
	// TrustedProxies are the peers whose X-Forwarded-For names the client
	// (the rightmost hop outside them): for --max-conns-per-ip, edge/whoami
	// and logs (CONTRACT.md section 11.5). [none]
	TrustedProxies []netip.Prefix
	// ProxyProtocol makes the WebSocket listener require a PROXY protocol
	// v1 or v2 header before the upgrade request, from a load balancer; the
	// header gives the client's address (section 11.5). [false]
	ProxyProtocol bool
	// ProxyProtocolFrom are the peers (the load balancers) a PROXY header
	// is trusted from; required with ProxyProtocol (0.0.0.0/0 and ::/0
	// trust any). A connection from elsewhere is closed unanswered as it is
	// accepted, counted rejected{reason="proxy_untrusted"} (proxy.go).
	// [none]
	ProxyProtocolFrom []netip.Prefix
	// NDJSONInsecure lets NDJSONListen be an address other than loopback:
	// NDJSON over TCP has no handshake and no authentication (CONTRACT.md
	// section 11). [false]
	NDJSONInsecure bool
	// TLS, when set, serves wss:// on the WebSocket listener (CONTRACT.md
	// section 11.6): Go's crypto/tls, handshakes on a pool of HandshakePool
	// workers off the loops, records on the loops (tls.go). Its MinVersion
	// is raised to TLS 1.2. [nil: plain ws://]
	TLS *tls.Config
	// HandshakePool is how many TLS handshakes run at once; a handshake
	// that finds every worker busy waits in a queue of HandshakeQueue.
	// [DefaultHandshakePool(): 4 per processor, at least 16]
	HandshakePool int
	// HandshakeQueue is how many TLS handshakes may wait for a worker; a
	// ClientHello that finds the queue full closes its connection
	// (handshake_pool_full). [DefaultHandshakeQueue: 128]
	HandshakeQueue int
	// HandshakeSilentTimeout bounds the time from accept to a wss://
	// client's first bytes (after the PROXY header with ProxyProtocol): a
	// peer that sends nothing is closed then; one that started its
	// handshake has HandshakeTimeout. At most HandshakeTimeout.
	// [DefaultHandshakeSilentTimeout: 3s]
	HandshakeSilentTimeout time.Duration
	// Loops is the number of gnet event loops [GOMAXPROCS].
	Loops int
	// MaxMessageBytes is the largest text message after reassembly [1048576].
	MaxMessageBytes int
	// MaxHeaderBytes caps the HTTP upgrade request head [16384].
	MaxHeaderBytes int
	// HandshakeTimeout bounds the time from accept to a complete upgrade [10s].
	HandshakeTimeout time.Duration
	// PingInterval is the silence after which the server pings [30s].
	PingInterval time.Duration
	// PongTimeout is how long a pinged connection may stay silent before it is closed [30s].
	PongTimeout time.Duration
	// CloseTimeout is how long the server waits for the peer's close frame after
	// sending its own before it drops the TCP connection [2s].
	CloseTimeout time.Duration
	// OutboundSoftBytes is the pending outbound volume above which the server
	// stops reading the connection and holds subscription events [1 MiB].
	OutboundSoftBytes int
	// OutboundHardBytes is the pending outbound volume above which the
	// connection is closed with 1008 [16 MiB].
	OutboundHardBytes int
	// MaxParkedBytes caps the bytes of WebSocket messages in progress
	// (partly arrived, waiting in their connection's reassembly buffer)
	// across all connections [256 MiB]: a connection whose message takes
	// the total over it is closed with 1013 (try again later).
	MaxParkedBytes int
	// WriteStallTimeout closes with 1008 a connection whose pending output
	// makes no progress for this long [10s].
	WriteStallTimeout time.Duration
	// ShutdownTimeout bounds how long graceful shutdown waits for in-flight work [5s].
	ShutdownTimeout time.Duration
	// ReadBufferBytes is the size of each loop's socket read buffer [65536].
	ReadBufferBytes int
	// SpareOutputBytes bounds the output buffers each loop keeps between
	// turns for reuse [64 MiB]. A busy loop reuses them instead of growing
	// new ones (a fan-out writes to thousands of connections in one turn);
	// the sweep releases what no turn used within about a second, so only a
	// busy loop holds them. Lower it to bound memory with many loops, at
	// some CPU per request under load.
	SpareOutputBytes int
	// Echo replaces JSON-RPC with a raw echo of every text message: the
	// framing stack alone, for the benchmark ceiling and conformance tests.
	Echo bool
	// Logger receives the gateway's logs [slog.Default()].
	Logger *slog.Logger
	// LogDropped, when set, reports the log lines the process dropped
	// (LogWriter.Dropped), for Stats.LogDropped. [nil: 0]
	LogDropped func() uint64
}

// Defaults (CONTRACT.md sections 1 and 9).
const (
	DefaultListen           = "127.0.0.1:8080"
	DefaultWSPath           = "/"
	DefaultMaxMessageBytes  = 1 << 20
	DefaultMaxHeaderBytes   = 16 << 10
	DefaultHandshakeTimeout = 10 * time.Second
	// DefaultHandshakeSilentTimeout: a TLS client sends its ClientHello
	// as soon as TCP connects, one round trip at most after the accept.
	DefaultHandshakeSilentTimeout = 3 * time.Second
	// DefaultHandshakeQueue: a reconnect storm of a few hundred clients
	// waits rather than being reset; each queued handshake holds a
	// descriptor and its ClientHello.
	DefaultHandshakeQueue  = 128
	DefaultPingInterval    = 30 * time.Second
	DefaultPongTimeout     = 30 * time.Second
	DefaultCloseTimeout    = 2 * time.Second
	DefaultShutdownTimeout = 5 * time.Second
	DefaultOutboundSoft    = 1 << 20
	DefaultOutboundHard    = 16 << 20
	DefaultWriteStall      = 10 * time.Second
	DefaultMaxParked       = 256 << 20
	DefaultReadBufferBytes = 64 << 10
	DefaultSpareOutput     = 64 << 20
)

// Validate reports every problem with c at once.
func (c *Config) Validate() error {
	var errs []error
	if c.Listen != "" {
		if _, _, err := net.SplitHostPort(c.Listen); err != nil {
			errs = append(errs, fmt.Errorf("listen %q: %v", c.Listen, err))
		}
	}
	if c.NDJSONListen != "" {
		if host, _, err := net.SplitHostPort(c.NDJSONListen); err != nil {
			errs = append(errs, fmt.Errorf("ndjson-listen %q: %v", c.NDJSONListen, err))
		} else if !c.NDJSONInsecure && !LoopbackHost(host) {
			errs = append(errs, fmt.Errorf("ndjson-listen %q: NDJSON over TCP has no authentication, so it serves loopback addresses only; add --ndjson-insecure to serve %q", c.NDJSONListen, host))
		}
	}
	switch {
	case c.ProxyProtocol && len(c.ProxyProtocolFrom) == 0:
		errs = append(errs, errors.New("proxy-protocol: the PROXY header names the client, so it is trusted only from the load balancer: "+
			"give its address or CIDR with --proxy-protocol-from (repeatable), or write --proxy-protocol-from 0.0.0.0/0 (and ::/0 for IPv6 peers) to trust any peer"))
	case !c.ProxyProtocol && len(c.ProxyProtocolFrom) > 0:
		errs = append(errs, errors.New("proxy-protocol-from needs --proxy-protocol"))
	}
	for _, o := range c.AllowOrigins {
		if o != "*" && !validOrigin(o) {
			errs = append(errs, fmt.Errorf("allow-origin %q: want scheme://host[:port] or *", o))
		}
	}
	if c.WSPath != "" && !strings.HasPrefix(c.WSPath, "/") {
		errs = append(errs, fmt.Errorf("ws-path %q must start with /", c.WSPath))
	}
	neg := func(name string, v int64) {
		if v < 0 {
			errs = append(errs, fmt.Errorf("%s %d must not be negative", name, v))
		}
	}
	neg("loops", int64(c.Loops))
	neg("max-conns", int64(c.MaxConns))
	neg("handshake-pool", int64(c.HandshakePool))
	neg("handshake-queue", int64(c.HandshakeQueue))
	neg("handshake-silent-timeout", int64(c.HandshakeSilentTimeout))
	neg("rate-limit", int64(c.RateLimit))
	neg("rate-burst", int64(c.RateBurst))
	neg("rate-limit-close-after", int64(c.RateCloseAfter))
	neg("max-conns-per-ip", int64(c.MaxConnsPerIP))
	neg("max-message-bytes", int64(c.MaxMessageBytes))
	neg("max-header-bytes", int64(c.MaxHeaderBytes))
	neg("handshake-timeout", int64(c.HandshakeTimeout))
	neg("ping-interval", int64(c.PingInterval))
	neg("pong-timeout", int64(c.PongTimeout))
	neg("close-timeout", int64(c.CloseTimeout))
	neg("shutdown-timeout", int64(c.ShutdownTimeout))
	neg("read-buffer-bytes", int64(c.ReadBufferBytes))
	neg("spare-output-bytes", int64(c.SpareOutputBytes))
	neg("outbound-soft-bytes", int64(c.OutboundSoftBytes))
	neg("outbound-hard-bytes", int64(c.OutboundHardBytes))
	neg("write-stall-timeout", int64(c.WriteStallTimeout))
	neg("max-parked-bytes", int64(c.MaxParkedBytes))
	if c.OutboundSoftBytes > 0 && c.OutboundHardBytes > 0 && c.OutboundSoftBytes > c.OutboundHardBytes {
		errs = append(errs, fmt.Errorf("outbound-soft-bytes %d must not exceed outbound-hard-bytes %d", c.OutboundSoftBytes, c.OutboundHardBytes))
	}
	msg := c.MaxMessageBytes
	if msg <= 0 {
		msg = DefaultMaxMessageBytes
	}
	if c.MaxParkedBytes > 0 && c.MaxParkedBytes/2 < msg {
		errs = append(errs, fmt.Errorf("max-parked-bytes %d must be at least twice max-message-bytes (%d)", c.MaxParkedBytes, msg))
	}
	if c.MaxHeaderBytes > 0 && c.MaxHeaderBytes < 256 {
		errs = append(errs, fmt.Errorf("max-header-bytes %d must be at least 256", c.MaxHeaderBytes))
	}
	return errors.Join(errs...)
}

// withDefaults returns c with zero values replaced by the defaults.
func (c Config) withDefaults() Config {
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	if c.MaxConns == 0 {
		c.MaxConns = DefaultMaxConns()
	}
	if c.RateBurst == 0 {
		c.RateBurst = 2 * c.RateLimit
	}
	if c.RateCloseAfter == 0 {
		c.RateCloseAfter = DefaultRateCloseAfter
	}
	setD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	if c.Listen == "" {
		c.Listen = DefaultListen
	}
	if c.WSPath == "" {
		c.WSPath = DefaultWSPath
	}
	set(&c.Loops, runtime.GOMAXPROCS(0))
	set(&c.HandshakePool, DefaultHandshakePool())
	set(&c.HandshakeQueue, DefaultHandshakeQueue)
	setD(&c.HandshakeSilentTimeout, DefaultHandshakeSilentTimeout)
	if c.TLS != nil {
		c.TLS = c.TLS.Clone()
		c.TLS.MinVersion = max(c.TLS.MinVersion, tls.VersionTLS12)
	}
	set(&c.MaxMessageBytes, DefaultMaxMessageBytes)
	set(&c.MaxHeaderBytes, DefaultMaxHeaderBytes)
	set(&c.ReadBufferBytes, DefaultReadBufferBytes)
	set(&c.SpareOutputBytes, DefaultSpareOutput)
	setD(&c.HandshakeTimeout, DefaultHandshakeTimeout)
	setD(&c.PingInterval, DefaultPingInterval)
	setD(&c.PongTimeout, DefaultPongTimeout)
	setD(&c.CloseTimeout, DefaultCloseTimeout)
	setD(&c.ShutdownTimeout, DefaultShutdownTimeout)
	set(&c.OutboundSoftBytes, DefaultOutboundSoft)
	set(&c.OutboundHardBytes, DefaultOutboundHard)
	setD(&c.WriteStallTimeout, DefaultWriteStall)
	set(&c.MaxParkedBytes, DefaultMaxParked)
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	return c
}

// tickInterval is how often each loop sweeps its connections for timeouts:
// a quarter of the shortest timeout, between 10 ms and 1 s.
func (c *Config) tickInterval() time.Duration {
	d := min(c.HandshakeTimeout, c.PingInterval, c.PongTimeout, c.CloseTimeout, c.WriteStallTimeout) / 4
	if c.TLS != nil {
		d = min(d, c.HandshakeSilentTimeout/4)
	}
	return max(10*time.Millisecond, min(d, time.Second))
}

// LoopbackHost reports whether host (from host:port) names only loopback
// addresses: "localhost", or an IP in 127.0.0.0/8 or ::1. An empty host (every
// interface) is not. The listeners without authentication of their own
// (--ndjson-listen, --admin-listen) serve such hosts only unless told
// otherwise.
func LoopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// validOrigin reports whether o is spelled scheme://host[:port], as a
// browser sends it: no path, no trailing slash.
func validOrigin(o string) bool {
	scheme, rest, ok := strings.Cut(o, "://")
	return ok && scheme != "" && rest != "" && !strings.ContainsAny(rest, "/?#@ ")
}

// DefaultMaxConns is the default of Config.MaxConns: the process's soft
// open-file limit minus 128 descriptors kept for listeners, upstreams, logs
// and the admin listener (CONTRACT.md section 11.1); at least half the limit
// when the limit is small.
func DefaultMaxConns() int {
	var rl unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == unix.RLIM_INFINITY || rl.Cur > 1<<30 {
		return 1 << 20
	}
	n := int(rl.Cur)
	return max(n-128, n/2, 1)
}
