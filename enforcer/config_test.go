package enforcer

import (
	"io"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want func(Config) bool
	}{
		{name: "defaults", args: []string{"--config", "s.json"}, want: func(c Config) bool {
			return c.SnapshotPath == "s.json" && c.GRPCAddr == DefaultGRPCAddr && c.StoreTimeout == DefaultStoreTimeout &&
				c.GCPercent == DefaultGCPercent && c.Store == "memory" && c.RedisPipelines == DefaultRedisPipelines
		}},
		{name: "flags", args: []string{"--config", "s.json", "--store-timeout", "7ms", "--gc-percent", "100", "--redis-pipelines", "-1"}, want: func(c Config) bool {
			return c.StoreTimeout == 7*time.Millisecond && c.GCPercent == 100 && c.RedisPipelines == -1
		}},
		{name: "environment twins", args: []string{"--config", "s.json"},
			env: map[string]string{"RLCTL_ENFORCER_GC_PERCENT": "-1", "RLCTL_ENFORCER_STORE": "redis", "RLCTL_ENFORCER_REDIS_URL": "redis://127.0.0.1:1/0",
				"RLCTL_ENFORCER_REDIS_PIPELINES": "8"},
			want: func(c Config) bool {
				return c.GCPercent == -1 && c.Store == "redis" && c.RedisURL == "redis://127.0.0.1:1/0" && c.RedisPipelines == 8
			}},
		{name: "a flag beats its twin", args: []string{"--config", "s.json", "--gc-percent", "200"},
			env:  map[string]string{"RLCTL_ENFORCER_GC_PERCENT": "50"},
			want: func(c Config) bool { return c.GCPercent == 200 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseArgs(tt.args, func(k string) string { return tt.env[k] }, io.Discard)
			if err != nil {
				t.Fatalf("ParseArgs: %v", err)
			}
			if !tt.want(c) {
				t.Errorf("got %+v", c)
			}
		})
	}
	if _, err := ParseArgs([]string{"--gc-percent", "x"}, func(string) string { return "" }, io.Discard); err == nil {
		t.Errorf("--gc-percent x: got no error")
	}
}
