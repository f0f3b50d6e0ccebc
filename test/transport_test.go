package test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"testing"

	"github.com/openengine/edge/internal/poll"
)

// peer is one client connection of either binding, as a transport-neutral
// script sees it: one JSON-RPC message per send and per recv.
type peer interface {
	send(msg string)
	recv() string
}

// wsPeer adapts the raw WebSocket client: one text message per message.
type wsPeer struct{ *client }

func (p wsPeer) send(msg string) { p.t.Helper(); p.sendText(msg) }
func (p wsPeer) recv() string    { p.t.Helper(); return p.readText() }

// transports are the bindings of one gateway started with withNDJSON
// (stdio is covered by cmd/edge's tests, which run the real command).
var transports = []struct {
	name string
	dial func(t *testing.T, gw *gateway) peer
}{
	{name: "ndjson-tcp", dial: func(t *testing.T, gw *gateway) peer { return dialND(t, gw) }},
	{name: "websocket", dial: func(t *testing.T, gw *gateway) peer { return wsPeer{dial(t, gw)} }},
}

// goldenSkip lists the goldens that the memory backend cannot answer, with
// the reason. admission-errors.ndjson exercises apply's admission checks
// (dry-run with an idempotency key, idempotency key reuse), which need a
// backend that implements apply; the memory backend is an empty cluster that
// answers apply -32000 INVALID_PHASE (CONTRACT.md section 8).
var goldenSkip = map[string]string{
	"admission-errors.ndjson": "apply admission checks need a backend that implements apply",
}

// goldenFiles returns every golden transcript in goldenDir that the memory
// backend can answer, as request/response line pairs by file name. A golden
// added to the seed fixtures is picked up without a change here.
func goldenFiles(t *testing.T) map[string][][2]string {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(goldenDir, "*.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][][2]string{}
	for _, p := range paths {
		name := filepath.Base(p)
		if _, skip := goldenSkip[name]; skip {
			continue
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var lines []string
		sc := bufio.NewScanner(bytes.NewReader(data))
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			if len(bytes.TrimSpace(sc.Bytes())) > 0 {
				lines = append(lines, sc.Text())
			}
		}
		if err := sc.Err(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(lines) == 0 || len(lines)%2 != 0 {
			t.Fatalf("%s: %d lines, want request/response pairs", name, len(lines))
		}
		for i := 0; i < len(lines); i += 2 {
			files[name] = append(files[name], [2]string{lines[i], lines[i+1]})
		}
	}
	// The seed fixtures have seven goldens the memory backend answers; fewer
	// means the fixtures moved, not that there is less to check.
	if len(files) < 7 {
		t.Fatalf("found %d goldens in %s, want at least 7", len(files), goldenDir)
	}
	return files
}

// TestGoldensOnEveryTransport sends each golden request over NDJSON on TCP and
// over WebSocket and requires the golden response byte for byte: the two
// bindings answer the same request identically (CONTRACT.md section 1.2).
func TestGoldensOnEveryTransport(t *testing.T) {
	gw := startGateway(t, withNDJSON)
	files := goldenFiles(t)
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, tr := range transports {
		for _, name := range names {
			t.Run(tr.name+"/"+name, func(t *testing.T) {
				p := tr.dial(t, gw)
				for _, pair := range files[name] {
					p.send(pair[0])
					if got := p.recv(); got != pair[1] {
						t.Fatalf("request %s\ngot  %s\nwant %s", pair[0], got, pair[1])
					}
				}
			})
		}
	}
}

// transcriptStep is what one step of the cross-transport script received,
// normalised: responses sorted (answers of different backend calls are not
// ordered), notifications kept in arrival order per subscription.
type transcriptStep struct {
	name string
	msgs []string
}

// recvN reads n messages and normalises them: responses (by id) first in
// sorted order, then the notifications of each subscription in arrival order,
// subscriptions sorted by id.
func recvN(p peer, n int) []string {
	var resps []string
	notes := map[string][]string{}
	for range n {
		msg := p.recv()
		var m struct {
			Method string `json:"method"`
			Params struct {
				SubscriptionID string `json:"subscriptionId"`
			} `json:"params"`
		}
		_ = json.Unmarshal([]byte(msg), &m)
		if m.Method == "" {
			resps = append(resps, msg)
			continue
		}
		notes[m.Params.SubscriptionID] = append(notes[m.Params.SubscriptionID], msg)
	}
	slices.Sort(resps)
	subs := make([]string, 0, len(notes))
	for id := range notes {
		subs = append(subs, id)
	}
	slices.Sort(subs)
	for _, id := range subs {
		resps = append(resps, notes[id]...)
	}
	return resps
}

// peerStats asks edge/stats with id and returns the counts and every other
// message that arrived before the answer.
func peerStats(t *testing.T, p peer, id string) (stats, []string) {
	t.Helper()
	p.send(`{"jsonrpc":"2.0","id":"` + id + `","method":"edge/stats","params":{}}`)
	var others []string
	for {
		msg := p.recv()
		r := parseResponse(t, msg)
		if string(r.ID) != strconv.Quote(id) {
			others = append(others, msg)
			continue
		}
		var s stats
		if err := json.Unmarshal(r.Result, &s); err != nil {
			t.Fatalf("edge/stats answer %s: %v", msg, err)
		}
		return s, others
	}
}

// peerSettle polls edge/stats until the connection holds no id, no slot and
// no subscription, and returns every other message received meanwhile.
func peerSettle(t *testing.T, p peer) []string {
	t.Helper()
	var all []string
	i := 0
	poll.Until(t, pollTimeout, "nothing held", func() (bool, string) {
		i++
		s, others := peerStats(t, p, "settle-"+strconv.Itoa(i))
		all = append(all, others...)
		return s.Tasks == 0 && s.InFlightIDs == 0 && s.Subscriptions == 0, fmt.Sprintf("stats %+v (other messages %q)", s, all)
	})
	return all
}

// runTranscript runs the cross-transport script on p and returns what each
// step received. Every step's messages are checked against the contract's
// bytes; cancelHonoured says whether the binding honours $/cancelRequest
// (WebSocket) or treats it as an ordinary envelope (NDJSON). The gateway
// must run with MaxConnTasks 2.
func runTranscript(t *testing.T, gw *gateway, p peer, cancelHonoured bool) []transcriptStep {
	t.Helper()
	var steps []transcriptStep
	step := func(name string, msgs []string, want ...string) {
		t.Helper()
		if !slices.Equal(msgs, want) {
			t.Fatalf("step %s:\ngot  %q\nwant %q", name, msgs, want)
		}
		steps = append(steps, transcriptStep{name: name, msgs: msgs})
	}

	p.send(`{"jsonrpc":"2.0","id":"init-1","method":"initialize","params":{"protocolVersion":"openengine.cluster/v1"}}`)
	step("initialize", recvN(p, 1),
		`{"jsonrpc":"2.0","id":"init-1","result":{"protocolVersion":"openengine.cluster/v1","capabilities":{"graphProfiles":[],"logs":false,"agentAttach":false},"status":{"phase":"empty","observedGeneration":null,"currentRunId":null,"atCursor":null}}}`)

	p.send(`{"jsonrpc":"2.0","id":9007199254740993,"method":"edge/echo","params":{"a":[1,"x",{"b":null}],"s":"\u00e9\n"}}`)
	step("echo", recvN(p, 1),
		`{"jsonrpc":"2.0","id":9007199254740993,"result":{"a":[1,"x",{"b":null}],"s":"\u00e9\n"}}`)

	// A duplicate of an id held by a gated request is refused at once; the
	// held request is untouched and answers once edge/open (sent on the same
	// connection, using the second slot) releases it.
	p.send(gate(`"g"`, "dup"))
	p.send(echoReq(`"g"`, "dup"))
	step("duplicate id", recvN(p, 1), duplicateID(`"g"`))
	gw.waitGate("dup", 1)
	p.send(`{"jsonrpc":"2.0","id":"o","method":"edge/open","params":{"name":"dup"}}`)
	step("edge/open releases", recvN(p, 2),
		gateResult(`"g"`, "dup"),
		`{"jsonrpc":"2.0","id":"o","result":{"released":1}}`)

	// Both slots held: a third request gets SERVER_BUSY, and a line that is
	// not JSON is dropped silently (CONTRACT.md section 3.2). The gate is
	// opened in the backend because this connection has no slot for edge/open.
	p.send(gate(`"b1"`, "busy"))
	p.send(gate(`"b2"`, "busy"))
	gw.waitGate("busy", 2)
	p.send(echoReq(`"b3"`, "busy"))
	step("server busy", recvN(p, 1), serverBusy(`"b3"`))
	p.send("not json")
	p.send(echoReq(`"b4"`, "busy"))
	// b4 is answered after "not json" was handled, so both met full slots.
	step("still busy", recvN(p, 1), serverBusy(`"b4"`))
	gw.openGate("busy")
	// Had "not json" been answered, its -32700 (written before the gate
	// opened) would be among these two messages.
	step("busy released", recvN(p, 2), gateResult(`"b1"`, "busy"), gateResult(`"b2"`, "busy"))
	p.send(echoReq(`"after-busy"`, "ok"))
	step("serving again", recvN(p, 1), echoRes(`"after-busy"`, "ok"))

	p.send(`{"jsonrpc":"2.0","id":"t","method":"edge/ticks","params":{"count":3,"intervalMs":0}}`)
	step("edge/ticks", recvN(p, 5),
		`{"jsonrpc":"2.0","id":"t","result":{"subscriptionId":"s1"}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"1","seq":1}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"2","seq":2}}`,
		`{"jsonrpc":"2.0","method":"event","params":{"subscriptionId":"s1","cursor":"3","seq":3}}`,
		`{"jsonrpc":"2.0","method":"subscription/closed","params":{"subscriptionId":"s1","reason":"done","lastDeliveredCursor":"3"}}`)

	p.send(`{"jsonrpc":"2.0","id":"w","method":"watch","params":{}}`)
	step("watch", recvN(p, 1), `{"jsonrpc":"2.0","id":"w","result":{"subscriptionId":"s2","runId":null,"atCursor":null}}`)
	// subscription/cancel is answered by nothing, and no subscription/closed
	// follows; the parked watch worker returns and frees its slot.
	p.send(`{"jsonrpc":"2.0","method":"subscription/cancel","params":{"subscriptionId":"s2"}}`)
	step("subscription/cancel", peerSettle(t, p))

	// $/cancelRequest is the documented difference: WebSocket cancels the
	// gated request (no answer, it leaves the gate); NDJSON answers the
	// envelope -32600 id null and the request goes on.
	p.send(gate(`"c"`, "cancel"))
	gw.waitGate("cancel", 1)
	p.send(cancel(`"c"`))
	if cancelHonoured {
		gw.waitGate("cancel", 0)
		p.send(`{"jsonrpc":"2.0","id":"o2","method":"edge/open","params":{"name":"cancel"}}`)
		step("$/cancelRequest", recvN(p, 1), `{"jsonrpc":"2.0","id":"o2","result":{"released":0}}`)
	} else {
		step("$/cancelRequest", recvN(p, 1), invalidRequest)
		p.send(`{"jsonrpc":"2.0","id":"o2","method":"edge/open","params":{"name":"cancel"}}`)
		// Not part of the step: what follows differs by design.
		if got, want := recvN(p, 2), []string{gateResult(`"c"`, "cancel"), `{"jsonrpc":"2.0","id":"o2","result":{"released":1}}`}; !slices.Equal(got, want) {
			t.Fatalf("after $/cancelRequest on NDJSON:\ngot  %q\nwant %q", got, want)
		}
	}
	if others := peerSettle(t, p); len(others) > 0 {
		t.Fatalf("unexpected messages: %q", others)
	}

	p.send(`{"jsonrpc":"2.0","id":"final","method":"edge/stats","params":{}}`)
	step("edge/stats", recvN(p, 1), `{"jsonrpc":"2.0","id":"final","result":{"inFlightIds":0,"tasks":0,"subscriptions":0,"outboundBytes":0}}`)
	return steps
}

// TestTranscriptSameOnNDJSONAndWebSocket runs one scripted session
// (initialize, edge/echo, a duplicate id held by edge/gate and released by
// edge/open, SERVER_BUSY with two slots, an edge/ticks subscription to its
// end, a watch cancelled with subscription/cancel, $/cancelRequest,
// edge/stats) on NDJSON over TCP and on WebSocket, and requires the same
// messages step by step, except for $/cancelRequest, which only WebSocket
// honours (CONTRACT.md section 1.2).
func TestTranscriptSameOnNDJSONAndWebSocket(t *testing.T) {
	gw := startGateway(t, withNDJSON, func(c *gwConfig) { c.rpc.MaxConnTasks = 2 })
	got := map[string][]transcriptStep{}
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			got[tr.name] = runTranscript(t, gw, tr.dial(t, gw), tr.name == "websocket")
		})
	}
	nd, ws := got["ndjson-tcp"], got["websocket"]
	if t.Failed() || len(nd) != len(ws) {
		t.Fatalf("transcripts of different length: ndjson %d steps, websocket %d", len(nd), len(ws))
	}
	for i := range nd {
		if nd[i].name != ws[i].name {
			t.Fatalf("step %d: ndjson %s, websocket %s", i, nd[i].name, ws[i].name)
		}
		if nd[i].name == "$/cancelRequest" {
			continue // the documented difference, checked by runTranscript
		}
		if !slices.Equal(nd[i].msgs, ws[i].msgs) {
			t.Errorf("step %s:\nndjson    %q\nwebsocket %q", nd[i].name, nd[i].msgs, ws[i].msgs)
		}
	}
}
