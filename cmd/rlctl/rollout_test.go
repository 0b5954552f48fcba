package main

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/rlctl/rlctl/schema"
	"github.com/rlctl/rlctl/simulate/traffic"
	"github.com/spf13/cobra"
)

// rollout's simulate gate replays a log as rlctl simulate does with its defaults, so that the
// gate judges the figures a user sees: its report's settings are simulate's flags' defaults.
func TestGateReplaysWithSimulateDefaults(t *testing.T) {
	m, err := schema.Load("../../policies")
	if err != nil {
		t.Fatal(err)
	}
	log := filepath.Join(t.TempDir(), "gen.jsonl")
	f, err := os.Create(log)
	if err != nil {
		t.Fatal(err)
	}
	if err := traffic.Write(f, traffic.Config{Seed: 3, Lines: 500, Format: traffic.EnvoyJSON, Gateways: 4}); err != nil {
		t.Fatal(err)
	}
	f.Close()
	cmd := &cobra.Command{}
	cmd.SetContext(context.Background())
	r, err := replayForGates(cmd, m, []string{log}, "")
	if err != nil {
		t.Fatal(err)
	}
	flags := newSimulateCmd().Flags()
	def := func(name string) string { return flags.Lookup(name).DefValue }
	if got, want := r.Settings.StoreLatency, def("store-latency"); got != want {
		t.Errorf("the gate's store latency %q, simulate's default %q", got, want)
	}
	if got, want := strconv.Itoa(r.Settings.Gateways), def("gateways"); got != want {
		t.Errorf("the gate's gateways %s, simulate's default %s", got, want)
	}
	if got, want := strconv.Itoa(r.Settings.NATUsers), def("nat-users"); got != want {
		t.Errorf("the gate's NAT users %s, simulate's default %s", got, want)
	}
	if got, want := r.Settings.Assignment, def("assign"); got != want {
		t.Errorf("the gate's assignment %q, simulate's default %q", got, want)
	}
}
