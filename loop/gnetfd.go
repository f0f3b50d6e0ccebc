package loop

import (
	"errors"
	"net"
	"reflect"
	"runtime/debug"
	"unsafe"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// gnet v2.9 registers a socket on an event loop only from a net.Conn
// (Client.Enroll/EnrollContext, EventLoop.Enroll, Engine.Register), which
// it dups, closes, and whose two net.Addr it keeps; its own acceptor
// (eventloop.accept0) makes the connection from the bare descriptor
// instead, with newStreamConn, and opens it on its loop with
// eventloop.register0. enrollFD does what accept0 does, through those two
// unexported functions (go:linkname, resolved at link time): the acceptor
// (accept.go) then needs neither a net.Conn nor a second descriptor per
// connection. gnet's connection gets no addresses (nil sockaddr, local and
// remote net.Addr: gnet reads them only for UDP and in Conn.LocalAddr and
// RemoteAddr, which edge does not call for these connections; OnOpen takes
// the peer's address from eventLoop.opening).
//
// The declarations below must match gnet's definitions exactly, which
// nothing checks at compile time: go.mod pins gnet at gnetFDVersion,
// TestGnetFDVersion fails when that changes, and Server.Start refuses to
// run when the binary was built with another gnet (its build information
// says which). Updating gnet means reading newStreamConn and register0 in
// its connection_unix.go and eventloop_unix.go again. The pointer
// arguments are gnet's *eventloop and *conn, passed as unsafe.Pointer.

// gnetFDVersion is the gnet version whose newStreamConn and register0 the
// declarations below were checked against.
const gnetFDVersion = "v2.9.7"

//go:linkname gnetNewStreamConn github.com/panjf2000/gnet/v2.newStreamConn
func gnetNewStreamConn(proto string, fd int, el unsafe.Pointer, sa unix.Sockaddr, localAddr, remoteAddr net.Addr) unsafe.Pointer

//go:linkname gnetRegister0 github.com/panjf2000/gnet/v2.(*eventloop).register0
func gnetRegister0(el unsafe.Pointer, c unsafe.Pointer) error

// errGnetVersion is what Start reports when the binary's gnet is not the
// one enrollFD was checked against.
var errGnetVersion = errors.New("loop: this build's gnet is not " + gnetFDVersion + ", the version enrollFD (gnetfd.go) was checked against")

// checkGnet reports errGnetVersion when the build information names a gnet
// other than gnetFDVersion, or el is not gnet's *eventloop. (A test binary
// has no dependency list: go.mod and TestGnetFDVersion guard it.)
func checkGnet(el gnet.EventLoop) error {
	if t := reflect.TypeOf(el); t == nil || t.String() != "*gnet.eventloop" {
		return errGnetVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/panjf2000/gnet/v2" {
				if d.Replace != nil || d.Version != gnetFDVersion {
					return errGnetVersion
				}
			}
		}
	}
	return nil
}

// enrollFD opens the TCP socket fd on el as gnet's acceptor does: OnOpen
// runs before it returns. On an error gnet has closed fd. Must be called on
// el's goroutine.
func enrollFD(el gnet.EventLoop, fd int) error {
	p := reflect.ValueOf(el).UnsafePointer()
	return gnetRegister0(p, gnetNewStreamConn("tcp", fd, p, nil, nil, nil))
}
