package stalls

import (
	"os"
	"syscall"
	"testing"
	"time"
)

func TestMain(m *testing.M) {
	Main()
	os.Exit(m.Run())
}

// TestWatchSeesStalls stops the sampler process (SIGSTOP) for 20 ms at a time, as a host that
// takes the CPUs away would, and checks that its report says so; a quiet run before it does
// not.
func TestWatchSeesStalls(t *testing.T) {
	w := Watch(t)
	time.Sleep(300 * time.Millisecond)
	quiet := w.Stop()
	t.Logf("quiet: %v", quiet)
	if quiet.Samples < 50 {
		t.Errorf("quiet: %d samples in 300ms of 1ms sleeps, want at least 50", quiet.Samples)
	}

	w = Watch(t)
	time.Sleep(20 * time.Millisecond)
	for range 15 {
		if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
		if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	stalled := w.Stop()
	t.Logf("stopped 15 times for 20ms: %v", stalled)
	if !stalled.Stalled(5*time.Millisecond) || stalled.Max < 15*time.Millisecond {
		t.Errorf("stopped 15 times for 20ms: %v; want a 99th percentile over 5ms and a max over 15ms", stalled)
	}
}

// TestOneLongStall: one stop of 150 ms in 2 s is one late sample of about a thousand, under the
// 99th percentile, and it is a stall all the same (the reviewer's case: the report said none).
func TestOneLongStall(t *testing.T) {
	w := Watch(t)
	time.Sleep(300 * time.Millisecond)
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond)
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second)
	r := w.Stop()
	t.Logf("stopped once for 150ms: %v", r)
	if !r.Stalled(5 * time.Millisecond) {
		t.Errorf("stopped once for 150ms: %v; want a stall", r)
	}
	if again := w.Stop(); again != r {
		t.Errorf("Stop again: %v, want the same report %v", again, r)
	}
}

func TestParse(t *testing.T) {
	late := []time.Duration{3 * time.Millisecond, time.Microsecond, 2 * time.Microsecond}
	r, err := parse("noise\n" + format(late) + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if want := (Report{Samples: 3, P50: 2 * time.Microsecond, P99: 3 * time.Millisecond, Max: 3 * time.Millisecond}); r != want {
		t.Errorf("parse(format): %+v, want %+v", r, want)
	}
	if _, err := parse("PASS\n"); err == nil {
		t.Error("parse of a run without the sampler: no error")
	}
}
