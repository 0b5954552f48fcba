package loadgen

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// Formats are the formats Result.Write writes.
var Formats = []string{"text", "json"}

// Result is a run's figures; its JSON form is rlctl bench -o json, public API.
type Result struct {
	Target      string `json:"target"`
	Concurrency int    `json:"concurrency"`
	// Requests are the calls the target answered, OK + OverLimit; RPS and LatencyUs are theirs.
	// Failed calls are Errors.
	Requests    int64            `json:"requests"`
	DurationS   float64          `json:"duration_s"`
	RPS         float64          `json:"rps"`
	OK          int64            `json:"ok"`
	OverLimit   int64            `json:"over_limit"`
	Errors      int64            `json:"errors"`
	FirstError  string           `json:"first_error,omitempty"`
	LatencyUs   Latency          `json:"latency_us"`
	RedisCmds   *int64           `json:"redis_commands,omitempty"`
	RedisPerReq *float64         `json:"redis_commands_per_request,omitempty"`
	RedisByCmd  map[string]int64 `json:"redis_commandstats,omitempty"`
	CPUUsPerReq *float64         `json:"cpu_us_per_request,omitempty"`
}

// Latency holds latency percentiles in microseconds.
type Latency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Write writes r in format, one of Formats.
func (r *Result) Write(w io.Writer, format string) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "text":
		return r.writeText(w)
	}
	return fmt.Errorf("-o %q: want text or json", format)
}

func (r *Result) writeText(out io.Writer) error {
	var w bytes.Buffer
	fmt.Fprintf(&w, "target       %s (concurrency %d)\n", r.Target, r.Concurrency)
	fmt.Fprintf(&w, "requests     %d answered in %.2fs\n", r.Requests, r.DurationS)
	fmt.Fprintf(&w, "rps          %.0f\n", r.RPS)
	fmt.Fprintf(&w, "latency      p50 %.0fµs  p90 %.0fµs  p99 %.0fµs  p999 %.0fµs  max %.0fµs\n",
		r.LatencyUs.P50, r.LatencyUs.P90, r.LatencyUs.P99, r.LatencyUs.P999, r.LatencyUs.Max)
	fmt.Fprintf(&w, "ok           %d\nover_limit   %d\nerrors       %d\n", r.OK, r.OverLimit, r.Errors)
	if r.FirstError != "" {
		fmt.Fprintf(&w, "first error  %s\n", r.FirstError)
	}
	if r.RedisPerReq != nil {
		fmt.Fprintf(&w, "redis        %d commands, %.4f per request\n", *r.RedisCmds, *r.RedisPerReq)
	}
	if r.CPUUsPerReq != nil {
		fmt.Fprintf(&w, "cpu          %.1fµs per request\n", *r.CPUUsPerReq)
	}
	_, err := out.Write(w.Bytes())
	return err
}
