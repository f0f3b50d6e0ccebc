package loop

import (
	"reflect"

	"github.com/panjf2000/gnet/v2"
	"golang.org/x/sys/unix"
)

// gnet v2 has no way to stop reading one connection: its loop reads every
// readable socket into an unbounded inbound buffer. CONTRACT.md section 6
// wants TCP backpressure above the outbound soft cap, so edge takes the read
// interest off the socket in the loop's epoll set itself, using the epoll
// descriptor of gnet v2.9's poller (eventloop.poller.fd, read by reflection
// because gnet does not export it). gnet re-arms reading on its own once the
// connection's outbound buffer is empty (Poller.ModRead after a full flush),
// which is also when edge would resume. If the layout is not what this code
// expects, epollFD reports -1 and edge falls back to not consuming input while
// paused, closing a peer that keeps sending past a bound (see Server.onTraffic).

// epollFD returns the epoll descriptor behind a gnet event loop, or -1.
func epollFD(el gnet.EventLoop) int {
	v := reflect.ValueOf(el)
	if v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Kind() != reflect.Struct {
		return -1
	}
	p := v.Elem().FieldByName("poller")
	if !p.IsValid() || p.Kind() != reflect.Pointer || p.IsNil() || p.Elem().Kind() != reflect.Struct {
		return -1
	}
	fd := p.Elem().FieldByName("fd")
	if !fd.IsValid() || fd.Kind() != reflect.Int {
		return -1
	}
	return int(fd.Int())
}

// setInterest sets the events the loop's epoll set watches on fd, in the form
// gnet's default (level-triggered) poller registers them.
func setInterest(epfd, fd int, read, write bool) error {
	var ev uint32
	if read {
		ev |= unix.EPOLLIN | unix.EPOLLPRI
	}
	if write {
		ev |= unix.EPOLLOUT
	}
	return unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, fd, &unix.EpollEvent{Fd: int32(fd), Events: ev})
}
