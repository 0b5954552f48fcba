package accesslog

import (
	"errors"
	"io"
	"sync"
	"time"
)

// readAhead reads a source on a goroutine of its own (fill) into a ring buffer, ahead of its
// reader: a gzip log is decompressed while the lines already decompressed are split and
// parsed, instead of in turns with them. It is an io.Reader for one goroutine; stop and close
// may be called from any.
//
// A reader that finds the ring empty waits for aheadWake bytes rather than for the next read
// of the source (some 32 KiB from gzip), so that it is woken a few times a megabyte and not
// dozens; but for no longer than aheadDelay while there are any, so that a log that arrives
// slowly, through a pipe, is still read as it arrives.
type readAhead struct {
	ring  []byte
	wake  chan struct{} // to the reader: the bytes it waits for, or the end
	room  chan struct{} // to fill: the ring has room again
	timer *time.Timer   // the reader's aheadDelay

	done   chan struct{} // closed by stop
	exited chan struct{} // closed when fill returns
	once   sync.Once

	mu   sync.Mutex
	w, r int64 // the bytes written to the ring and read from it, so far
	err  error // why fill ended, after the bytes written
	want int64 // the reader waits for w-r >= want; 0 when it does not wait
	full bool  // fill waits for room

	rerr error // the reader's error, once it has read every byte
}

const (
	aheadSize  = 2 << 20
	aheadWake  = 512 << 10
	aheadDelay = 5 * time.Millisecond
)

var errClosed = errors.New("reader closed")

// startReadAhead starts reading src ahead.
func startReadAhead(src io.Reader) *readAhead {
	ra := &readAhead{
		ring:   make([]byte, aheadSize),
		wake:   make(chan struct{}, 1),
		room:   make(chan struct{}, 1),
		timer:  time.NewTimer(time.Hour),
		done:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	ra.timer.Stop()
	go ra.fill(src)
	return ra
}

// signal wakes the goroutine waiting on c, if any, or the next to wait on it.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// fill reads src into the ring until src ends or fails, or stop. It keeps src's own error:
// io.EOF is the end, and io.ErrUnexpectedEOF from gzip a truncated stream.
func (ra *readAhead) fill(src io.Reader) {
	defer close(ra.exited)
	size := int64(len(ra.ring))
	empty := 0
	for {
		ra.mu.Lock()
		for ra.w-ra.r == size {
			ra.full = true
			ra.mu.Unlock()
			select {
			case <-ra.room:
			case <-ra.done:
				return
			}
			ra.mu.Lock()
		}
		// The free bytes from w on, up to the end of the ring: the reader reads only below w.
		at := ra.w % size
		end := min(size, at+size-(ra.w-ra.r))
		ra.mu.Unlock()
		select {
		case <-ra.done:
			return
		default:
		}
		n, err := src.Read(ra.ring[at:end])
		if n > 0 || err != nil {
			empty = 0
		} else if empty++; empty == 100 {
			err = io.ErrNoProgress
		}
		ra.mu.Lock()
		ra.w += int64(n)
		ra.err = err
		if ra.want > 0 && (ra.w-ra.r >= ra.want || err != nil) {
			ra.want = 0
			signal(ra.wake)
		}
		ra.mu.Unlock()
		if err != nil {
			return
		}
	}
}

// Read reads what fill has read, then its error. It returns errClosed once stopped.
func (ra *readAhead) Read(p []byte) (int, error) {
	if ra.rerr != nil {
		return 0, ra.rerr
	}
	select {
	case <-ra.done:
		ra.rerr = errClosed
		return 0, ra.rerr
	default:
	}
	if err := ra.wait(); err != nil {
		ra.rerr = err
		return 0, err
	}
	ra.mu.Lock()
	defer ra.mu.Unlock()
	size := int64(len(ra.ring))
	avail := ra.w - ra.r
	if avail == 0 {
		ra.rerr = ra.err // wait returned for it
		return 0, ra.rerr
	}
	at := ra.r % size
	n := copy(p, ra.ring[at:min(size, at+avail)])
	ra.r += int64(n)
	if ra.full && size-(ra.w-ra.r) >= size/4 {
		ra.full = false
		signal(ra.room)
	}
	return n, nil
}

// wait waits, if the ring is empty, until it has aheadWake bytes, or any bytes after
// aheadDelay, or fill has ended.
func (ra *readAhead) wait() error {
	ra.mu.Lock()
	if ra.w > ra.r || ra.err != nil {
		ra.mu.Unlock()
		return nil
	}
	ra.want = aheadWake
	ra.mu.Unlock()
	ra.timer.Reset(aheadDelay)
	defer ra.timer.Stop()
	late := false
	for {
		select {
		case <-ra.wake: // or a signal left from an earlier wait: the test below tells
		case <-ra.timer.C:
			late = true
		case <-ra.done:
			return errClosed
		}
		ra.mu.Lock()
		if ra.err != nil || (ra.w > ra.r && (late || ra.w-ra.r >= aheadWake)) {
			ra.want = 0
			ra.mu.Unlock()
			return nil
		}
		ra.want = aheadWake
		if late {
			ra.want = 1
		}
		ra.mu.Unlock()
	}
}

// stop stops the read-ahead without waiting for it.
func (ra *readAhead) stop() {
	ra.once.Do(func() { close(ra.done) })
}

// close stops the read-ahead and waits for its goroutine to end, which may have one read of
// the source to finish.
func (ra *readAhead) close() {
	ra.stop()
	<-ra.exited
}
