// Command edge is a WebSocket JSON-RPC 2.0 data-plane gateway on gnet event
// loops. Run it with no flags to serve the embedded memory backend on
// 127.0.0.1:8080; `edge --help` lists every flag with its default.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/openengine/edge/auth"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/openengine/edge/backend"
	"github.com/openengine/edge/dashboard"
	"github.com/openengine/edge/loop"
	"github.com/openengine/edge/metrics"
	"github.com/openengine/edge/rpc"
	"github.com/openengine/edge/topics"
	"github.com/openengine/edge/upstream"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintln(os.Stderr, "edge:", err)
		os.Exit(2)
	}
}

// options are the flags, from the command line, the environment or the
// --config file (config.go).
type options struct {
	loop           loop.Config
	maxConn        int
	maxTasks       int
	cancelReply    string
	registry       string
	logLevel       string
	logBuffer      int // --log-buffer-bytes
	workerIdle     time.Duration
	stdio          bool
	subBuffer      int
	subBufferBytes int

	profile  string
	maxBatch int
	// subscribeMethods is --subscribe-methods, a comma list of patterns.
	subscribeMethods string

	authTokens string         // --auth-tokens
	verifiers  auth.Chain     // loaded by prepare
	jwt        auth.JWTConfig // --jwt-*
	upstreams  []upstream.Spec
	routes     []upstream.Route
	upstream   upstream.Config
	topics     topics.Config // --nats, --nats-prefix, --jetstream*
	// topicsMaxBytes is --jetstream-max-bytes (an int flag, as config.go
	// knows them), copied into topics.MaxBytes by check.
	topicsMaxBytes int

	tlsCert string // --tls-cert
	tlsKey  string // --tls-key
	// reloaders are what SIGHUP reloads: the verifiers and the
	// certificate. Loaded by prepare.
	reloaders []interface{ Reload() error }

	configFile    string // --config: the TOML file read under the environment
	adminListen   string
	adminPprof    bool
	adminInsecure bool   // --admin-insecure
	adminTokens   string // --admin-token: the file
	// adminToken is --admin-token's token, loaded by prepare (admin.go).
	adminToken *adminToken
}

// listFlag collects a repeatable flag. From the environment or the --config
// file it gets the whole list at once; on the command line the list given
// there replaces theirs (config.go).
type listFlag struct {
	add  func(string) error
	seen []string
}

func (f *listFlag) String() string { return strings.Join(f.seen, " ") }

func (f *listFlag) Set(s string) error {
	f.seen = append(f.seen, s)
	return f.add(s)
}

// Get returns the values given so far (flag.Getter): `edge config` prints
// them as a TOML array.
func (f *listFlag) Get() any { return slices.Clone(f.seen) }

// DefaultMaxTasks is the default global cap on backend tasks.
const DefaultMaxTasks = 65536

// usage is the head of `edge --help`, before the flags.
const usage = `Usage: edge [flags]                  serve (make run: on the memory backend)
       edge config [flags]           check and print the effective configuration as TOML
       edge call|subscribe [flags] URL METHOD [PARAMS]   poke a gateway (edge call --help)
       edge worker --nats URL --prefix PREFIX           serve the memory backend over NATS
       edge version | edge health [ADMIN-ADDR]

A WebSocket JSON-RPC 2.0 gateway (openengine.cluster/v1 data plane).

Every flag can also be set by an environment variable, EDGE_ followed by the
flag's name in upper snake case (EDGE_MAX_CONN_TASKS=512), or by a key of the
TOML file of --config (max-conn-tasks = 512). A flag on the command line wins
over the environment, which wins over the file. A repeatable flag given on the
command line replaces the list from the environment or the file; in the
environment a list is a TOML array:
EDGE_UPSTREAM='["a=tcp://127.0.0.1:9000", "b=exec:edge --stdio"]'.
`

// defineFlags defines every flag of edge on fs, filling o, and returns the
// names of the flags whose values are secrets: `edge config` prints those as
// "<redacted>".
func defineFlags(fs *flag.FlagSet, o *options) (secret map[string]bool) {
	// Tokens and passwords (the access-control flags) are marked here.
	secret = map[string]bool{}
	c := &o.loop
	fs.StringVar(&o.configFile, "config", "", "read flags from this TOML `file` (keys are the flag names; the command line and EDGE_* variables win over it)")
	fs.StringVar(&c.Listen, "listen", loop.DefaultListen, "WebSocket listen address `host:port`")
	fs.StringVar(&c.NDJSONListen, "ndjson-listen", "", "also serve NDJSON over TCP on `host:port` (off when empty)")
	fs.StringVar(&o.adminListen, "admin-listen", "", "serve /healthz, /readyz, /metrics and the dashboard over plain HTTP on this admin `host:port` (off when empty); a non-loopback address needs --admin-token or --admin-insecure")
	fs.StringVar(&o.adminTokens, "admin-token", "", "`FILE` holding a token (at least 16 bytes) that every admin endpoint but /healthz requires: Authorization: Bearer TOKEN (a browser: any user name, TOKEN as the password); SIGHUP reloads it")
	fs.BoolVar(&o.adminInsecure, "admin-insecure", false, "let --admin-listen serve a non-loopback address without --admin-token (anyone who reaches it sees metrics, the dashboard and, with --admin-pprof, profiles)")
	fs.BoolVar(&o.adminPprof, "admin-pprof", false, "also serve net/http/pprof under /debug/pprof/ on the admin listener")
	fs.BoolVar(&o.stdio, "stdio", false, "serve one NDJSON session on stdin/stdout instead of listening (logs go to stderr)")
	fs.StringVar(&c.WSPath, "ws-path", loop.DefaultWSPath, "the HTTP path that upgrades to WebSocket; other paths get 404")
	fs.Var(&listFlag{add: func(s string) error {
		c.AllowOrigins = append(c.AllowOrigins, s)
		return nil
	}}, "allow-origin", "`ORIGIN` (scheme://host[:port], repeatable, or *) a browser page may open a WebSocket from, besides the gateway's own host; other Origins get 403")
	fs.IntVar(&c.RateLimit, "rate-limit", 0, "messages per second a connection may send; a request over it gets RATE_LIMITED (0: off)")
	fs.IntVar(&c.RateBurst, "rate-burst", 0, "burst above --rate-limit (0: twice the limit)")
	fs.IntVar(&c.RateCloseAfter, "rate-limit-close-after", loop.DefaultRateCloseAfter, "refusals in a row after which the connection is closed with 1008 \"rate limit exceeded\"")
	fs.StringVar(&o.authTokens, "auth-tokens", "", "`FILE` of static bearer tokens, one SUBJECT TOKEN per line (# comments); turns authentication on; SIGHUP reloads it")
	fs.Var(&listFlag{add: func(s string) error {
		o.jwt.KeyFiles = append(o.jwt.KeyFiles, s)
		return nil
	}}, "jwt-key", "public key `FILE` (repeatable) verifying JWT bearer tokens: PEM public keys or certificates (RS*, PS*, ES*, EdDSA) or a JWKS document (by kid); anything else, a symmetric or a private key included, is refused at start; turns authentication on; SIGHUP reloads it")
	fs.Var(&listFlag{add: func(s string) error {
		o.jwt.HMACKeyFiles = append(o.jwt.HMACKeyFiles, s)
		return nil
	}}, "jwt-hmac-key", "HMAC secret `FILE` (repeatable, with --jwt-alg) verifying JWT bearer tokens: the file's bytes exactly, at least the hash size (32, 48, 64 bytes); a file that parses as JSON, PEM or DER, or text ending in a line break, is refused; turns authentication on; SIGHUP reloads it")
	fs.StringVar(&o.jwt.Alg, "jwt-alg", "", "algorithm of the --jwt-hmac-key secrets: HS256, HS384 or HS512 (public keys carry their own)")
	fs.DurationVar(&o.jwt.Leeway, "jwt-leeway", auth.DefaultLeeway, "clock skew allowed on exp, nbf and iat")
	fs.StringVar(&o.jwt.Audience, "jwt-audience", "", "the aud a JWT must carry (unchecked when empty)")
	fs.StringVar(&o.jwt.Issuer, "jwt-issuer", "", "the iss a JWT must carry (unchecked when empty)")
	fs.BoolVar(&o.jwt.AllowNoExp, "jwt-allow-no-exp", false, "accept JWTs without exp (identities that never expire)")
	fs.StringVar(&c.AuthQueryParam, "auth-query-param", "", "also take the bearer token from this query parameter (browsers cannot set headers on a WebSocket); never logged")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate chain `FILE`: with --tls-key, the WebSocket listener serves wss:// (TLS 1.2 and later, Go's crypto/tls); SIGHUP reloads it")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key `FILE` of --tls-cert")
	fs.IntVar(&c.HandshakePool, "handshake-pool", loop.DefaultHandshakePool(), "TLS handshakes run at once, off the event loops; a ClientHello that finds every worker busy waits in the --handshake-queue")
	fs.IntVar(&c.HandshakeQueue, "handshake-queue", loop.DefaultHandshakeQueue, "TLS handshakes that may wait for a --handshake-pool worker; beyond it the connection is closed at once")
	fs.DurationVar(&c.HandshakeSilentTimeout, "handshake-silent-timeout", loop.DefaultHandshakeSilentTimeout, "time from accept to a wss:// client's first bytes (its ClientHello; after the PROXY header with --proxy-protocol); a client that started its handshake has --handshake-timeout")
	fs.IntVar(&c.MaxConns, "max-conns", loop.DefaultMaxConns(), "connections open at once; an upgrade beyond it gets 503 with Retry-After: 1 (default: the open-file limit minus 128)")
	fs.IntVar(&c.MaxConnsPerIP, "max-conns-per-ip", 0, "connections open at once from one client address; beyond it 503 (0: no limit)")
	fs.Var(&listFlag{add: func(s string) error {
		p, err := parseTrustedProxy(s)
		c.TrustedProxies = append(c.TrustedProxies, p)
		return err
	}}, "trusted-proxy", "`CIDR` (repeatable; an address alone is one host) of a proxy in front of edge: an upgrade from it takes the client's address from X-Forwarded-For (the rightmost hop outside every --trusted-proxy) for --max-conns-per-ip, edge/whoami and logs")
	fs.BoolVar(&c.ProxyProtocol, "proxy-protocol", false, "the WebSocket listener requires a PROXY protocol v1 or v2 header (from a load balancer) before the upgrade; it gives the client's address; a connection without one is closed; needs --proxy-protocol-from")
	fs.Var(&listFlag{add: func(s string) error {
		p, err := parseTrustedProxy(s)
		c.ProxyProtocolFrom = append(c.ProxyProtocolFrom, p)
		return err
	}}, "proxy-protocol-from", "`CIDR` (repeatable; an address alone is one host) of the load balancer sending --proxy-protocol headers: a connection from any other peer is closed unanswered (0.0.0.0/0 and ::/0 trust any peer)")
	fs.BoolVar(&c.NDJSONInsecure, "ndjson-insecure", false, "let --ndjson-listen serve a non-loopback address (NDJSON over TCP has no authentication)")
	fs.IntVar(&c.Loops, "loops", 0, "number of event loops (0 = GOMAXPROCS)")
	fs.IntVar(&c.MaxMessageBytes, "max-message-bytes", loop.DefaultMaxMessageBytes, "largest text message after reassembly; larger closes with 1009")
	fs.IntVar(&c.MaxHeaderBytes, "max-header-bytes", loop.DefaultMaxHeaderBytes, "cap on the HTTP upgrade request head, and on an http upstream's response head")
	fs.DurationVar(&c.HandshakeTimeout, "handshake-timeout", loop.DefaultHandshakeTimeout, "time allowed from accept to a complete upgrade")
	fs.DurationVar(&c.PingInterval, "ping-interval", loop.DefaultPingInterval, "silence after which the server sends a ping")
	fs.DurationVar(&c.PongTimeout, "pong-timeout", loop.DefaultPongTimeout, "further silence after the ping before the connection is closed")
	fs.DurationVar(&c.CloseTimeout, "close-timeout", loop.DefaultCloseTimeout, "wait for the peer's close frame before dropping the TCP connection")
	fs.DurationVar(&c.ShutdownTimeout, "shutdown-timeout", loop.DefaultShutdownTimeout, "on SIGTERM/SIGINT, time in-flight work gets to finish")
	fs.IntVar(&c.SpareOutputBytes, "spare-output-bytes", loop.DefaultSpareOutput, "output buffers each event loop keeps between turns for reuse (released within about a second once unused)")
	fs.IntVar(&c.ReadBufferBytes, "read-buffer-bytes", loop.DefaultReadBufferBytes, "per-loop socket read buffer size")
	fs.IntVar(&c.OutboundSoftBytes, "outbound-soft-bytes", loop.DefaultOutboundSoft, "pending outbound bytes above which a connection's reads pause and subscription events are held")
	fs.IntVar(&c.OutboundHardBytes, "outbound-hard-bytes", loop.DefaultOutboundHard, "pending outbound bytes above which a connection is closed with 1008")
	fs.IntVar(&c.MaxParkedBytes, "max-parked-bytes", loop.DefaultMaxParked, "bytes of WebSocket messages still arriving (partly received) that all connections together may hold; a connection whose message takes the total over it is closed with 1013 (at least twice --max-message-bytes)")
	fs.DurationVar(&c.WriteStallTimeout, "write-stall-timeout", loop.DefaultWriteStall, "pending output with no progress for this long closes the connection with 1008")
	fs.IntVar(&o.subBuffer, "subscription-buffer", rpc.DefaultSubscriptionBuffer, "undelivered events a subscription may hold before it is closed SLOW_CONSUMER")
	fs.IntVar(&o.subBufferBytes, "subscription-buffer-bytes", rpc.DefaultSubscriptionBufferBytes, "cap on the bytes of a subscription's undelivered events")
	fs.IntVar(&o.maxConn, "max-conn-tasks", rpc.DefaultMaxConnTasks, "task slots per connection; more concurrent requests get SERVER_BUSY")
	fs.IntVar(&o.maxTasks, "max-tasks", DefaultMaxTasks, "global cap on backend tasks across all connections")
	fs.StringVar(&o.cancelReply, "cancel-reply", "none", "what a cancelled request gets: none, or error (-32800)")
	fs.StringVar(&o.registry, "registry", "", "OpenRPC `file` listing the methods (default: the built-in OECP v1 registry)")
	fs.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.IntVar(&o.logBuffer, "log-buffer-bytes", loop.DefaultLogBufferBytes, "logs wait for stderr in a buffer of this size; a line that finds it full is dropped and counted (edge_log_dropped_total), so logging never blocks")
	fs.DurationVar(&o.workerIdle, "worker-idle", 5*time.Second, "idle time after which a backend worker goroutine exits")
	fs.Var(&listFlag{add: func(s string) error {
		sp, err := upstream.ParseSpec(s)
		o.upstreams = append(o.upstreams, sp)
		return err
	}}, "upstream", "`NAME=URL` of a service edge forwards to: exec:CMD ARGS, tcp://HOST:PORT (NDJSON), ws://HOST:PORT/PATH or http://HOST:PORT/PATH; repeat a NAME to add replicas (default: the embedded memory backend)")
	fs.Var(&listFlag{add: func(s string) error {
		r, err := upstream.ParseRoute(s)
		o.routes = append(o.routes, r)
		return err
	}}, "route", "`PATTERN=NAME`: methods matching PATTERN (a name, or a prefix ending in *) go to upstream NAME or to memory; first match wins, unmatched methods go to the first --upstream")
	fs.StringVar(&o.profile, "profile", "oecp", "protocol profile: oecp (OECP v1), or jsonrpc (plain JSON-RPC 2.0: positional params, batches, any method forwarded to its route)")
	fs.IntVar(&o.maxBatch, "max-batch", rpc.DefaultMaxBatch, "most requests in one batch (jsonrpc profile); a larger batch gets -32600")
	fs.StringVar(&o.subscribeMethods, "subscribe-methods", strings.Join(rpc.DefaultSubscribeMethods, ","), "`PATTERNS` (comma-separated) of the plain JSON-RPC subscription methods, jsonrpc profile only: NS_subscribe, or * and such a suffix; a match is a subscription with NS_subscription notifications, ended by NS_unsubscribe, over a ws, tcp or exec upstream (an http upstream answers it itself); empty: none")
	fs.IntVar(&o.upstream.Conns, "upstream-conns", upstream.DefaultConns, "connections per tcp or ws upstream replica, spread over the event loops (at least --loops keeps every call on its own loop)")
	fs.IntVar(&o.upstream.HTTPConns, "upstream-http-conns", upstream.DefaultHTTPConns, "requests in flight at most to one http upstream replica (each its own connection); a call over it gets SERVER_BUSY, a notification over it is dropped and counted")
	fs.DurationVar(&o.upstream.Timeout, "upstream-timeout", upstream.DefaultTimeout, "a forwarded call not answered in this time gets UPSTREAM_TIMEOUT")
	fs.DurationVar(&o.upstream.BackoffMax, "upstream-backoff-max", upstream.DefaultBackoffMax, "longest wait between reconnects to an upstream (from 100ms, doubling, with jitter)")
	fs.IntVar(&o.upstream.MaxPendingBytes, "upstream-max-pending-bytes", upstream.DefaultMaxPendingBytes, "output an exec, tcp or ws upstream connection may hold unread: a call beyond it gets UPSTREAM_UNAVAILABLE; an answer to the upstream's own request, a pong or a cancel beyond it closes the connection (its calls UPSTREAM_UNAVAILABLE, subscriptions UPSTREAM_LOST) and it reconnects")
	fs.DurationVar(&o.upstream.WriteStallTimeout, "upstream-write-stall-timeout", upstream.DefaultWriteStall, "an exec, tcp or ws upstream connection whose pending output makes no progress for this long is closed and reconnects")
	fs.IntVar(&o.upstream.StderrRate, "upstream-stderr-rate", upstream.DefaultStderrRate, "stderr lines of an exec upstream logged per second (a burst of as many); the excess is counted and reported with the next line")
	fs.StringVar(&o.topics.URL, "nats", "", "NATS server `URL` (nats://HOST:PORT): edge/publish on any edge reaches the edge/topic subscribers of every edge (off when empty)")
	fs.StringVar(&o.topics.Prefix, "nats-prefix", topics.DefaultPrefix, "subject prefix of the topics over --nats: topic NAME is the subject PREFIX.topic.NAME")
	fs.BoolVar(&o.topics.JetStream, "jetstream", false, "keep the topics of --nats in the JetStream stream PREFIX_topics (created if missing): cursors are stream sequences and edge/topic takes fromCursor")
	fs.DurationVar(&o.topics.MaxAge, "jetstream-max-age", topics.DefaultMaxAge, "when edge creates the --jetstream stream: how long it keeps an event")
	fs.IntVar(&o.topicsMaxBytes, "jetstream-max-bytes", topics.DefaultMaxBytes, "when edge creates the --jetstream stream: the bytes it keeps (the oldest events go first)")
	return secret
}

// parseTrustedProxy reads a --trusted-proxy value: a CIDR, or an address
// alone for that one host.
func parseTrustedProxy(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	if a, err := netip.ParseAddr(s); err == nil && a.Zone() == "" {
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	return netip.Prefix{}, fmt.Errorf("want a CIDR such as 10.0.0.0/8 or an IP address, got %q", s)
}

// check reports every problem of o at once; each error starts with the name
// of the flag it is about (config.go says where that value came from).
func (o *options) check() []error {
	c := &o.loop
	var errs []error
	if err := c.Validate(); err != nil {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			errs = append(errs, j.Unwrap()...) // one error per flag
		} else {
			errs = append(errs, err)
		}
	}
	if c.Listen == "" {
		errs = append(errs, errors.New("listen must not be empty"))
	}
	if o.maxConn <= 0 {
		errs = append(errs, fmt.Errorf("max-conn-tasks %d must be positive", o.maxConn))
	}
	if o.maxTasks <= 0 {
		errs = append(errs, fmt.Errorf("max-tasks %d must be positive", o.maxTasks))
	}
	if _, err := rpc.ParseCancelReply(o.cancelReply); err != nil {
		errs = append(errs, fmt.Errorf("cancel-reply %q: want none or error", o.cancelReply))
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		errs = append(errs, err)
	}
	if o.subBuffer <= 0 {
		errs = append(errs, fmt.Errorf("subscription-buffer %d must be positive", o.subBuffer))
	}
	if o.subBufferBytes <= 0 {
		errs = append(errs, fmt.Errorf("subscription-buffer-bytes %d must be positive", o.subBufferBytes))
	}
	if _, err := rpc.ParseProfile(o.profile); err != nil {
		errs = append(errs, fmt.Errorf("profile %q: want oecp or jsonrpc", o.profile))
	}
	if o.maxBatch <= 0 {
		errs = append(errs, fmt.Errorf("max-batch %d must be positive", o.maxBatch))
	}
	if _, err := rpc.ParseSubscribeMethods(o.subscribeMethods); err != nil {
		errs = append(errs, fmt.Errorf("subscribe-methods: %w", err))
	}
	if o.upstream.Conns <= 0 {
		errs = append(errs, fmt.Errorf("upstream-conns %d must be positive", o.upstream.Conns))
	}
	if o.upstream.HTTPConns <= 0 {
		errs = append(errs, fmt.Errorf("upstream-http-conns %d must be positive", o.upstream.HTTPConns))
	}
	if o.upstream.Timeout <= 0 {
		errs = append(errs, fmt.Errorf("upstream-timeout %s must be positive", o.upstream.Timeout))
	}
	if o.upstream.BackoffMax <= 0 {
		errs = append(errs, fmt.Errorf("upstream-backoff-max %s must be positive", o.upstream.BackoffMax))
	}
	if o.upstream.MaxPendingBytes <= 0 {
		errs = append(errs, fmt.Errorf("upstream-max-pending-bytes %d must be positive", o.upstream.MaxPendingBytes))
	}
	if o.upstream.WriteStallTimeout <= 0 {
		errs = append(errs, fmt.Errorf("upstream-write-stall-timeout %s must be positive", o.upstream.WriteStallTimeout))
	}
	if o.upstream.StderrRate <= 0 {
		errs = append(errs, fmt.Errorf("upstream-stderr-rate %d must be positive", o.upstream.StderrRate))
	}
	if o.logBuffer <= 0 {
		errs = append(errs, fmt.Errorf("log-buffer-bytes %d must be positive", o.logBuffer))
	}
	if len(o.routes) > 0 && len(o.upstreams) == 0 {
		errs = append(errs, errors.New("--route needs an --upstream"))
	}
	if o.workerIdle <= 0 {
		errs = append(errs, fmt.Errorf("worker-idle %s must be positive", o.workerIdle))
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		errs = append(errs, errors.New("tls-cert and tls-key go together: give both or neither"))
	}
	if o.tlsCert != "" && o.stdio {
		errs = append(errs, errors.New("tls-cert: --stdio has no listener to serve wss:// on"))
	}
	errs = append(errs, o.checkAdmin()...)
	errs = append(errs, o.checkTopics()...)
	return errs
}

// checkTopics checks the flags of the topics over NATS (CONTRACT.md
// section 13).
func (o *options) checkTopics() []error {
	t := &o.topics
	t.MaxBytes = int64(o.topicsMaxBytes)
	var errs []error
	if t.URL == "" {
		if t.JetStream {
			errs = append(errs, errors.New("--jetstream needs --nats"))
		}
		return errs
	}
	if t.Prefix == "" || !topics.ValidName(t.Prefix) {
		errs = append(errs, fmt.Errorf("nats-prefix %q: want dot-separated tokens without spaces, '*' or '>'", t.Prefix))
	}
	if t.MaxAge <= 0 {
		errs = append(errs, fmt.Errorf("jetstream-max-age %s must be positive", t.MaxAge))
	}
	if t.MaxBytes <= 0 {
		errs = append(errs, fmt.Errorf("jetstream-max-bytes %d must be positive", t.MaxBytes))
	}
	return errs
}

// checkAdmin checks the admin flags against each other and against the data
// listeners: the admin listener never shares the data plane's port.
func (o *options) checkAdmin() []error {
	var errs []error
	a := o.adminListen
	if a == "" {
		if o.adminPprof {
			errs = append(errs, errors.New("--admin-pprof needs --admin-listen"))
		}
		if o.adminTokens != "" {
			errs = append(errs, errors.New("--admin-token needs --admin-listen"))
		}
		return errs
	}
	host, _, err := net.SplitHostPort(a)
	if err != nil {
		return append(errs, fmt.Errorf("admin-listen %q: %v", a, err))
	}
	if !loop.LoopbackHost(host) && o.adminTokens == "" && !o.adminInsecure {
		errs = append(errs, fmt.Errorf("admin-listen %q: %q is not a loopback address, and the admin endpoints have no authentication of their own: "+
			"give --admin-token FILE (a token every endpoint but /healthz then requires), or --admin-insecure to serve them to anyone who can reach %q", a, host, host))
	}
	for _, d := range []struct{ name, addr string }{{"listen", o.loop.Listen}, {"ndjson-listen", o.loop.NDJSONListen}} {
		if d.addr != "" && a == d.addr && !strings.HasSuffix(a, ":0") {
			errs = append(errs, fmt.Errorf("--admin-listen %s is also the --%s address: the admin listener needs a port of its own", a, d.name))
		}
	}
	return errs
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("log-level %q: want debug, info, warn or error", s)
	}
	return l, nil
}

// run wires the gateway from args (and the environment, and the --config
// file) and serves until ctx is cancelled, then shuts down gracefully
// (CONTRACT.md section 9). Its error shows no URL credentials (masked).
func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	return masked(serve(ctx, args, stdin, stdout, stderr))
}

// serve is run, its error as it comes.
func serve(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) > 0 {
		switch args[0] {
		case "call", "subscribe":
			return runClient(ctx, args[0], args[1:], stdout, stderr)
		case "config":
			return runConfig(args[1:], os.Environ(), stdout, stderr)
		case "worker":
			return runWorker(ctx, args[1:], stderr)
		case "version", "--version", "-version":
			return runVersion(stdout)
		case "health":
			return runHealth(ctx, args[1:], stdout)
		}
	}
	if wantsHelp(args) {
		fs := flag.NewFlagSet("edge", flag.ContinueOnError)
		defineFlags(fs, &options{})
		printHelp(stdout, fs)
		return flag.ErrHelp
	}
	environ := os.Environ()
	cfg, err := loadConfig(args, environ, stderr)
	if err != nil {
		return err
	}
	scrubEnv(environ)
	o := cfg.opts
	level, _ := parseLevel(o.logLevel)
	// Logging never blocks (issue 24): a stderr nobody reads fills
	// the LogWriter's buffer, not the event loops' turns.
	logOut := loop.NewLogWriter(stderr, o.logBuffer)
	defer logOut.Close(time.Second)
	logger := newLogger(logOut, level)
	o.upstream.Logger = logger
	reg, ups, err := prepare(o)
	if err != nil {
		return err
	}
	if len(o.reloaders) > 0 {
		hupCtx, stopHUP := context.WithCancel(ctx)
		defer stopHUP()
		reloadOnHUP(hupCtx, o.reloaders, logger)
	}
	cancelReply, _ := rpc.ParseCancelReply(o.cancelReply)
	pool := backend.NewPool(o.maxTasks, o.workerIdle)
	defer pool.Close()
	mem := backend.NewMemory()
	var forward func(string) backend.Forwarder
	if !ups.Empty() {
		forward = ups.Forwarder
		// Started once the gateway's event loops run (their connections
		// live there), or on their own loop with --stdio.
		defer ups.Close() // after the gateway has drained: see below
	}
	var tops *topics.Topics
	if o.topics.URL != "" {
		o.topics.Logger = logger
		o.topics.BackoffMax = o.upstream.BackoffMax
		// Every wait on NATS (a publish's acknowledgement, a
		// subscription's set-up) ends within --upstream-timeout.
		o.topics.Timeout = min(topics.DefaultTimeout, o.upstream.Timeout)
		if tops, err = topics.New(o.topics); err != nil {
			return err
		}
		if err := tops.Start(); err != nil {
			return err
		}
		defer tops.Close() // after the gateway has drained
		forward = tops.Route(forward)
	}
	profile, _ := rpc.ParseProfile(o.profile)
	subscribeMethods, _ := rpc.ParseSubscribeMethods(o.subscribeMethods)
	srv, err := rpc.NewServer(rpc.Config{
		Profile:                 profile,
		MaxBatch:                o.maxBatch,
		SubscribeMethods:        subscribeMethods,
		Forward:                 forward,
		MaxConnTasks:            o.maxConn,
		CancelReply:             cancelReply,
		Registry:                reg,
		Handler:                 mem,
		NonBlocking:             mem.NonBlocking,
		Pool:                    pool,
		Logger:                  logger,
		SubscriptionBuffer:      o.subBuffer,
		SubscriptionBufferBytes: o.subBufferBytes,
	})
	if err != nil {
		return err
	}
	ready := newReadiness(srv, ups, o.routes)
	ready.topics = tops
	var gw *loop.Server
	var m *metrics.Metrics
	var pages map[string]http.Handler // the admin listener's metrics and dashboard
	if !o.stdio {
		o.loop.Logger = logger
		o.loop.LogDropped = logOut.Dropped
		if gw, err = loop.New(o.loop, srv); err != nil {
			return err
		}
		m = metrics.New(gw, srv, ups)
		m.SetInstance(instanceOf(o, gw, nil))
		pages = map[string]http.Handler{
			"GET /metrics":     m.Handler(),
			"GET /api/stats":   m.StatsHandler(),
			"GET /api/history": m.HistoryHandler(),
			"/":                dashboard.Handler(),
		}
	}
	adm, err := startAdmin(o, logger, ready, pages)
	if err != nil {
		return err
	}
	if adm != nil && m != nil {
		// The dashboard's history is sampled for as long as the admin
		// listener serves it.
		m.SetInstance(instanceOf(o, gw, adm))
		m.Start()
	}
	// Deferred after ups.Close, so it runs before it: the admin listener
	// closes once the gateway has stopped, and /readyz says "draining"
	// until then.
	defer func() {
		stopAdmin(adm, logger)
		if m != nil {
			m.Close()
		}
	}()
	if o.stdio {
		ups.Start()
		ready.set(stageServing)
		return loop.ServeStream(ctx, stdin, stdout, srv, loop.StreamConfig{
			MaxLineBytes:    o.loop.MaxMessageBytes,
			ShutdownTimeout: o.loop.ShutdownTimeout,
		})
	}
	if err := gw.Start(); err != nil {
		return err
	}
	ups.StartOn(gw)
	if m != nil {
		m.SetInstance(instanceOf(o, gw, adm)) // the addresses the listeners took
	}
	ready.set(stageServing)
	addr := gw.Addr().String()
	scheme := "ws://"
	if o.loop.TLS != nil {
		scheme = "wss://"
	}
	attrs := []any{"addr", addr, "url", scheme + addr + o.loop.WSPath, "backend", backends(ups)}
	if nd := gw.NDJSONAddr(); nd != nil {
		attrs = append(attrs, "ndjson", nd.String())
	}
	logger.Info("listening", attrs...)
	select {
	case <-ctx.Done():
	case <-gw.Done():
		ready.set(stageStopped)
		return errors.New("event loops stopped unexpectedly")
	}
	// Not ready from here on, before the listeners close: load balancers
	// polling /readyz stop sending new connections while the gateway drains.
	ready.set(stageDraining)
	logger.Info("shutting down", "timeout", o.loop.ShutdownTimeout)
	stopCtx, cancel := context.WithTimeout(context.Background(), o.loop.ShutdownTimeout+5*time.Second)
	defer cancel()
	err = gw.Shutdown(stopCtx)
	ready.set(stageStopped)
	if err != nil {
		return fmt.Errorf("shutdown: %w", err)
	}
	logger.Info("stopped")
	return nil
}

// prepare builds what the configuration names before anything starts: the
// method registry (the built-in one, or --registry's file) and the upstream
// set (not started), and checks the routes against the registry. Its errors
// make a configuration invalid for `edge config` too.
func prepare(o *options) (*rpc.Registry, *upstream.Set, error) {
	reg := rpc.DefaultRegistry()
	if o.registry != "" {
		f, err := os.Open(o.registry)
		if err != nil {
			return nil, nil, fmt.Errorf("registry: %w", err)
		}
		reg, err = rpc.LoadOpenRPC(f)
		f.Close()
		if err != nil {
			return nil, nil, fmt.Errorf("registry %s: %w", o.registry, err)
		}
	}
	o.upstream.MaxMessageBytes = o.loop.MaxMessageBytes
	o.upstream.MaxHeaderBytes = o.loop.MaxHeaderBytes
	ups, err := upstream.NewSet(o.upstreams, o.routes, o.upstream)
	if err != nil {
		return nil, nil, err
	}
	// Under the jsonrpc profile an http upstream answers a registry's
	// subscription method itself (CONTRACT.md section 10): nothing to
	// refuse.
	if profile, _ := rpc.ParseProfile(o.profile); profile == rpc.ProfileOECP {
		if err := checkRoutes(ups, reg); err != nil {
			return nil, nil, err
		}
	}
	if err := loadAuth(o); err != nil {
		return nil, nil, err
	}
	if err := loadTLS(o); err != nil {
		return nil, nil, err
	}
	if o.adminTokens != "" {
		t, err := loadAdminToken(o.adminTokens)
		if err != nil {
			return nil, nil, err
		}
		o.adminToken = t
		o.reloaders = append(o.reloaders, t)
	}
	return reg, ups, nil
}

// loadAuth loads --auth-tokens, --jwt-key and --jwt-hmac-key into the
// listener's verifier (CONTRACT.md section 11.3); without any, authentication
// is off.
func loadAuth(o *options) error {
	var chain auth.Chain
	if o.authTokens != "" {
		path := o.authTokens
		r, err := auth.NewReloadable(func() (auth.Verifier, error) { return auth.LoadTokens(path) })
		if err != nil {
			return fmt.Errorf("auth-tokens: %w", err)
		}
		chain = append(chain, r)
	}
	if len(o.jwt.KeyFiles) > 0 || len(o.jwt.HMACKeyFiles) > 0 || o.jwt.Alg != "" {
		cfg := o.jwt
		r, err := auth.NewReloadable(func() (auth.Verifier, error) { return auth.NewJWT(cfg) })
		if err != nil {
			return err // it names the flag and the file
		}
		chain = append(chain, r)
	}
	if len(chain) > 0 {
		o.loop.Auth, o.verifiers = chain, chain
		o.reloaders = append(o.reloaders, chain)
	}
	return nil
}

// reloadOnHUP reloads the verifiers and the certificate on SIGHUP until ctx
// ends: open connections keep their identity and their TLS session; a file
// that fails to load keeps the previous keys or certificate and is logged.
func reloadOnHUP(ctx context.Context, rs []interface{ Reload() error }, logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	go func() {
		defer signal.Stop(hup)
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				var errs []error
				for _, r := range rs {
					if err := r.Reload(); err != nil {
						errs = append(errs, err)
					}
				}
				if err := errors.Join(errs...); err != nil {
					logger.Warn("reload on SIGHUP: kept the previous keys", "err", err)
				} else {
					logger.Info("reloaded the token files, keys and certificate on SIGHUP")
				}
			}
		}
	}()
}

// checkRoutes refuses a subscription method routed to an upstream that can
// only carry unary calls (http), naming the route (CONTRACT.md section 10);
// the oecp profile's check.
func checkRoutes(ups *upstream.Set, reg *rpc.Registry) error {
	var errs []string
	reg.Methods(func(m *rpc.Method) {
		if m.Kind != rpc.Subscription || ups.Forwarder(m.Name) == nil {
			return
		}
		u, r := ups.Lookup(m.Name)
		if !u.HTTPOnly() {
			return
		}
		how := "the default route (the first --upstream)"
		if r != nil {
			how = "route " + r.String()
		}
		errs = append(errs, fmt.Sprintf("%s sends subscription method %s to http upstream %s, which cannot carry subscriptions", how, m.Name, u.Name()))
	})
	if len(errs) == 0 {
		return nil
	}
	slices.Sort(errs)
	return errors.New(strings.Join(errs, "\n"))
}

// backends names what serves the methods, for the start-up log line.
func backends(ups *upstream.Set) string {
	if ups.Empty() {
		return "memory"
	}
	var names []string
	for _, u := range ups.Upstreams() {
		names = append(names, u.Name())
	}
	return strings.Join(names, ",")
}
