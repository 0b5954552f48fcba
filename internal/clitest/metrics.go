package clitest

import (
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Metric returns the value of the sample whose line starts with prefix (a name with its
// labels, such as `rate_limit_config_reloads_total{result="ok"}`) on the Prometheus /metrics
// page of the admin server at addr, or -1 when there is none.
func Metric(t testing.TB, addr, prefix string) float64 {
	t.Helper()
	for _, line := range strings.Split(MetricsPage(t, addr), "\n") {
		if v, ok := strings.CutPrefix(line, prefix+" "); ok {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				return f
			}
		}
	}
	return -1
}

// httpClient gives up on an admin server after 10s: one that stalls fails its test rather
// than holding the package until its timeout.
var httpClient = &http.Client{Timeout: 10 * time.Second}

// MetricsPage returns the Prometheus /metrics page of the admin server at addr.
func MetricsPage(t testing.TB, addr string) string {
	t.Helper()
	resp, err := httpClient.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
