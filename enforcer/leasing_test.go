package enforcer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// TestSummarize: the errors of a shutdown's lease returns make one line, however many leases
// failed: with Redis unreachable, 30,000 leases wrote 14,341 stderr lines and a log line of
// 416 KB. errors.Is still finds what it wraps.
func TestSummarize(t *testing.T) {
	open := errors.New("store: circuit breaker open")
	var errs []error
	for i := range 30000 {
		switch {
		case i%1000 == 0:
			errs = append(errs, fmt.Errorf("lease %d: %w", i, context.DeadlineExceeded))
		case i%2 == 0:
			errs = append(errs, errors.Join(open, nil))
		default:
			errs = append(errs, nil, open)
		}
	}
	err := summarize("lease returns failed", errs)
	if strings.Contains(err.Error(), "\n") || len(err.Error()) > 400 {
		t.Errorf("got %d bytes over %d lines, want one short line: %.300s", len(err.Error()), strings.Count(err.Error(), "\n")+1, err)
	}
	if want := "30000 lease returns failed: store: circuit breaker open (29970); lease 0: context deadline exceeded (1); lease 1000: context deadline exceeded (1); 28 other messages"; err.Error() != want {
		t.Errorf("got %q\nwant %q", err, want)
	}
	if !errors.Is(err, open) || !errors.Is(err, context.DeadlineExceeded) {
		t.Error("errors.Is does not find the errors summarized")
	}
	if summarize("x", []error{nil, errors.Join(nil)}) != nil {
		t.Error("no error summarized as one")
	}
}
