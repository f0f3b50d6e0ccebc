package load

import (
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The attached connections' reads and writes and the poller's harvest never
// block (the descriptors are non-blocking and the harvest's timeout is zero),
// so they are issued as raw syscalls, without telling the Go scheduler. With
// a plain syscall the scheduler treats each as possibly blocking: a loopback
// write that runs the receiver's TCP stack in the same call often lasts
// longer than a sysmon tick, and with GOMAXPROCS=1 sysmon then takes the P
// away, wakes another thread to hold it, and the writer has to win it back;
// measured, that was a fifth of the generator's CPU at 30k requests/s.

// rawRead is read(2) on a non-blocking descriptor.
func rawRead(fd int, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall(unix.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

// rawWrite is write(2) on a non-blocking descriptor.
func rawWrite(fd int, p []byte) (int, syscall.Errno) {
	if len(p) == 0 {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall(unix.SYS_WRITE, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	return int(n), e
}

// rawPoll is epoll_pwait(2) with a zero timeout: it harvests the ready
// events without waiting.
func rawPoll(ep int, evs []unix.EpollEvent) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT, uintptr(ep), uintptr(unsafe.Pointer(&evs[0])), uintptr(len(evs)), 0, 0, 0)
	return int(n), e
}
