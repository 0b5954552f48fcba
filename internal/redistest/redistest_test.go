package redistest

import (
	"context"
	"fmt"
	"testing"
	"time"
)

func TestServerLifecycle(t *testing.T) {
	s := Start(t)
	ctx := context.Background()
	if s.Addr() == "127.0.0.1:6379" {
		t.Fatal("started on the system Redis port")
	}
	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	pid := s.PID()
	if pid == 0 {
		t.Fatal("PID() = 0 for a running server")
	}

	s.Pause()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err := c.Ping(short).Err()
	cancel()
	if err == nil {
		t.Fatal("paused server answered PING")
	}
	s.Resume()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after resume: %v", err)
	}

	s.Restart()
	if s.PID() == pid {
		t.Errorf("PID after restart = %d, want a new process", pid)
	}
	if got, err := c.Get(ctx, "k").Result(); err == nil {
		t.Errorf("after restart: k = %q, want no data", got)
	}

	s.Kill()
	if s.PID() != 0 {
		t.Errorf("PID() after Kill = %d, want 0", s.PID())
	}
	s.Start()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("ping after start: %v", err)
	}
}

func TestCluster(t *testing.T) {
	cl := StartCluster(t, 3)
	ctx := context.Background()
	c := cl.Client()
	nodes := map[string]bool{}
	for i := range 100 {
		k := fmt.Sprintf("key%d", i)
		if err := c.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("set %s: %v", k, err)
		}
		n, err := c.MasterForKey(ctx, k)
		if err != nil {
			t.Fatalf("master for %s: %v", k, err)
		}
		nodes[n.Options().Addr] = true
	}
	if len(nodes) != 3 {
		t.Errorf("keys on %d masters, want 3", len(nodes))
	}
}

func TestSentinelFailover(t *testing.T) {
	s := StartSentinel(t)
	ctx := context.Background()
	c := s.Client()
	if err := c.Set(ctx, "k", "v", 0).Err(); err != nil {
		t.Fatalf("set: %v", err)
	}
	s.Master().Kill()
	deadline := time.Now().Add(20 * time.Second)
	for {
		short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := c.Set(short, "k2", "v", 0).Err()
		cancel()
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no failover: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	role, err := s.Replica().Client().Do(ctx, "ROLE").Slice()
	if err != nil || role[0] != "master" {
		t.Errorf("replica role after failover = %v, %v; want master", role, err)
	}
}
