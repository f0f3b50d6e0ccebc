package test

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openengine/edge/internal/poll"
	"github.com/openengine/edge/rpc"
	"github.com/openengine/edge/upstream"
)

// jsonrpcService is a generic JSON-RPC 2.0 service over HTTP POST, written
// for these tests as a stand-in for the services a platform team fronts
// with edge: positional params, an error object of its own shape, a call
// that blocks until its request is aborted, and notifications.
type jsonrpcService struct {
	url      string
	notified atomic.Int64  // notifications received
	aborted  chan struct{} // a "block" call's request was aborted
	blocked  chan struct{} // a "block" call arrived
}

func startJSONRPCService(t *testing.T) *jsonrpcService {
	t.Helper()
	s := &jsonrpcService{aborted: make(chan struct{}, 16), blocked: make(chan struct{}, 16)}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(s.serve)}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	s.url = "http://" + ln.Addr().String() + "/rpc"
	return s
}

func (s *jsonrpcService) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/rpc" || r.Header.Get("Content-Type") != "application/json" {
		http.Error(w, "want POST /rpc application/json", http.StatusBadRequest)
		return
	}
	body, _ := io.ReadAll(r.Body)
	var req struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params json.RawMessage `json:"params"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if req.ID == nil {
		s.notified.Add(1)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	reply := func(member string) {
		io.WriteString(w, `{"jsonrpc":"2.0","id":`+string(req.ID)+`,`+member+`}`)
	}
	switch req.Method {
	case "sum":
		var xs []int
		if req.Params != nil && json.Unmarshal(req.Params, &xs) != nil {
			reply(`"error":{"code":-32602,"message":"want [a, b]"}`)
			return
		}
		n := 0
		for _, x := range xs {
			n += x
		}
		b, _ := json.Marshal(n)
		reply(`"result":` + string(b))
	case "fail":
		reply(`"error":{"code":7,"message":"it failed","data":[1,"two",{"three":3}]}`)
	case "block":
		s.blocked <- struct{}{}
		select {
		case <-r.Context().Done():
			s.aborted <- struct{}{}
		case <-time.After(pollTimeout):
		}
	default:
		reply(`"error":{"code":-32601,"message":"Method not found"}`)
	}
}

// TestJSONRPCProfileThroughHTTP: with --profile jsonrpc edge fronts a
// generic JSON-RPC 2.0 service over HTTP (CONTRACT.md section 10):
// positional params, methods outside the registry, the service's own error
// objects byte for byte, batches answered as one array with admission per
// element, notifications passed on and never answered, and a cancelled call
// aborts its HTTP request.
func TestJSONRPCProfileThroughHTTP(t *testing.T) {
	svc := startJSONRPCService(t)
	p := startProxyWith(t, upstream.Config{}, []string{"svc=" + svc.url}, nil, func(c *gwConfig) {
		c.rpc.Profile = rpc.ProfileJSONRPC
		c.rpc.MaxBatch = 3
		c.rpc.MaxConnTasks = 2
	})
	c := dial(t, p.gateway)

	c.sendText(`{"jsonrpc":"2.0","id":1,"method":"sum","params":[2,3]}`)
	c.expectText(`{"jsonrpc":"2.0","id":1,"result":5}`)
	c.sendText(`{"jsonrpc":"2.0","id":"f","method":"fail","params":[]}`)
	c.expectText(`{"jsonrpc":"2.0","id":"f","error":{"code":7,"message":"it failed","data":[1,"two",{"three":3}]}}`)
	c.sendText(`{"jsonrpc":"2.0","id":2,"method":"sum"}`) // params may be absent
	c.expectText(`{"jsonrpc":"2.0","id":2,"result":0}`)

	// A batch: one array once all are done; the notification adds nothing.
	c.sendText(`[{"jsonrpc":"2.0","id":"a","method":"sum","params":[1,1]},{"jsonrpc":"2.0","method":"note","params":[1]},{"jsonrpc":"2.0","id":"b","method":"sum","params":[2,2]}]`)
	got := c.readText()
	var arr []json.RawMessage
	if err := json.Unmarshal([]byte(got), &arr); err != nil || len(arr) != 2 {
		t.Fatalf("batch answer %s: want an array of 2", got)
	}
	want := map[string]bool{`{"jsonrpc":"2.0","id":"a","result":2}`: true, `{"jsonrpc":"2.0","id":"b","result":4}`: true}
	for _, m := range arr {
		if !want[string(m)] {
			t.Fatalf("batch answer %s: unexpected element %s", got, m)
		}
		delete(want, string(m))
	}
	// Admission per element: a repeated id is a duplicate; with two slots
	// the third request of a batch is SERVER_BUSY (the batch is admitted in
	// one turn, before any answer can free a slot).
	for batch, want := range map[string]string{
		`[{"jsonrpc":"2.0","id":"x","method":"sum","params":[1]},{"jsonrpc":"2.0","id":"x","method":"sum","params":[1]},{"jsonrpc":"2.0","id":"y","method":"sum","params":[5]}]`: duplicateID(`"x"`),
		`[{"jsonrpc":"2.0","id":"p","method":"sum","params":[1]},{"jsonrpc":"2.0","id":"q","method":"sum","params":[1]},{"jsonrpc":"2.0","id":"r","method":"sum","params":[5]}]`: serverBusy(`"r"`),
	} {
		c.sendText(batch)
		got = c.readText()
		if err := json.Unmarshal([]byte(got), &arr); err != nil || len(arr) != 3 {
			t.Fatalf("batch answer %s: want an array of 3", got)
		}
		n := 0
		for _, m := range arr {
			if string(m) == want {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("batch answer %s: want one %s", got, want)
		}
	}
	// Batches of only notifications get nothing; empty and oversized ones
	// one -32600.
	c.sendText(`[{"jsonrpc":"2.0","method":"note"}]`)
	c.sendText(`{"jsonrpc":"2.0","method":"note","params":{"a":1}}`)
	c.sendText(`[]`)
	c.expectText(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request"}}`)
	c.sendText(`[1,2,3,4]`)
	c.expectText(`{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request","data":{"code":"BATCH_TOO_LARGE"}}}`)
	poll.Until(t, pollTimeout, "3 notifications at the service", func() (bool, string) {
		n := svc.notified.Load()
		return n == 3, fmt.Sprintf("%d", n)
	})

	// A cancelled call aborts its HTTP request and gets nothing.
	c.sendText(`{"jsonrpc":"2.0","id":"blk","method":"block","params":[]}`)
	<-svc.blocked
	c.sendText(cancel(`"blk"`))
	select {
	case <-svc.aborted:
	case <-time.After(pollTimeout):
		t.Fatal("the cancelled call's HTTP request was not aborted")
	}
	c.expectSettled(0, 0)
}
