package schema

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// minWindowMs is the shortest window the loader accepts; the longest is policy.MaxWindowMs, a
// year.
const minWindowMs = 1000

var unitMs = []struct {
	suffix string
	ms     int64
}{
	// "ms" comes before "s" and "m" so the longest suffix wins.
	{"ms", 1},
	{"s", 1000},
	{"m", 60 * 1000},
	{"h", 3600 * 1000},
	{"d", 24 * 3600 * 1000},
}

// ParseDuration parses a policy duration: a whole number followed by ms, s, m, h or d, such as
// "250ms", "30s", "5m", "1h" or "7d". Unlike time.ParseDuration it knows days and takes one unit
// only, so a window reads the same in every file.
func ParseDuration(s string) (ms int64, err error) {
	for _, u := range unitMs {
		num, ok := strings.CutSuffix(s, u.suffix)
		if !ok || num == "" || strings.TrimLeft(num, "0123456789") != "" {
			continue
		}
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n > math.MaxInt64/u.ms {
			return 0, fmt.Errorf("duration %q is too large", s)
		}
		return n * u.ms, nil
	}
	return 0, fmt.Errorf("duration %q must be a whole number followed by ms, s, m, h or d", s)
}

// FormatDuration writes ms as a policy would: a whole number of the largest unit that divides
// it, such as "250ms", "30s", "5m" or "7d". ParseDuration reads it back to ms.
func FormatDuration(ms int64) string {
	for i := len(unitMs) - 1; i > 0; i-- {
		if u := unitMs[i]; ms != 0 && ms%u.ms == 0 {
			return strconv.FormatInt(ms/u.ms, 10) + u.suffix
		}
	}
	return strconv.FormatInt(ms, 10) + "ms"
}
