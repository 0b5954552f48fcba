package main

import (
	"compress/gzip"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/rlctl/rlctl/internal/atomicfile"
	"github.com/rlctl/rlctl/simulate"
	"github.com/rlctl/rlctl/simulate/traffic"
	"github.com/spf13/cobra"
)

const genLogsLong = `Generate realistic synthetic gateway traffic as an access log.

The output is deterministic: the same --seed, --lines, --format, --start and --gateways give the
same bytes. The traffic mixes API tenants on a Zipf distribution, an enterprise integration at a
steady high rate (tenant bigcorp), dashboards that fire 25 parallel calls, a corporate office of
2,000 users behind one NAT address (198.51.100.23), a bot rotating addresses inside
192.0.2.0/24, mobile users behind carrier-grade NAT (100.64.0.0/10), anonymous browsing and
payment calls.

--format picks the shape of the same requests:
  envoy-json  Envoy JSON lines carrying the request headers the example policies read
              (x-tenant-id, authorization with an unsigned JWT, x-api-key, x-ja4) and the
              gateway node in "hostname" (the default).
  istio-json  Istio's JSON access log (meshConfig accessLogEncoding: JSON) with its default
              format's keys, sorted as Envoy writes them, unset values as null, plus the same
              headers and "hostname" added to the format. Lines are about 1 KB, not 650 bytes.
  envoy-text  Envoy's default text format, which carries no such headers.
rlctl simulate reads envoy-json and istio-json lines of one request into the same record.

--out FILE writes to FILE instead of stdout; a FILE ending in .gz is written gzip-compressed
(about a tenth of the size), and rlctl simulate and rollout plan --log read it as it is. The
compressed bytes are deterministic too.

Exit codes: 0 written, 3 usage or write error.`

func newGenLogsCmd() *cobra.Command {
	var (
		seed     uint64
		lines    int
		format   string
		out      string
		start    string
		gateways int
	)
	cmd := &cobra.Command{
		Use:   "gen-logs",
		Short: "Generate deterministic synthetic access logs",
		Long:  genLogsLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var errs []error
			f, err := traffic.ParseFormat(format)
			if err != nil {
				errs = append(errs, fmt.Errorf("--%w", err))
			}
			cfg := traffic.Config{Seed: seed, Lines: lines, Format: f, Gateways: gateways}
			if lines < 0 {
				errs = append(errs, fmt.Errorf("--lines %d: must not be negative", lines))
			}
			if gateways < 1 || gateways > simulate.MaxGateways {
				// simulate --assign field:hostname takes at most MaxGateways gateways.
				errs = append(errs, fmt.Errorf("--gateways %d: want 1 to %d", gateways, simulate.MaxGateways))
			}
			if start != "" {
				t, err := time.Parse(time.RFC3339, start)
				switch {
				case err != nil:
					errs = append(errs, fmt.Errorf("--start %q: want RFC 3339, such as 2024-05-01T12:00:00Z", start))
				case t.Year() < 1970 || t.Year() >= 9000:
					// simulate reads the years 1970 to 9999, and a log runs on from its start.
					errs = append(errs, fmt.Errorf("--start %q: want a time from 1970 to 8999", start))
				}
				cfg.Start = t
			}
			if err := settingErrors("gen-logs", errs); err != nil {
				return err
			}
			if out != "" && out != "-" {
				gz := strings.EqualFold(filepath.Ext(out), ".gz") // A.GZ as a.gz
				if err := atomicfile.Write(out, func(w io.Writer) error { return writeLog(w, cfg, gz) }); err != nil {
					return usageErrorf("gen-logs: --out %w", err)
				}
				return nil
			}
			w := cmd.OutOrStdout()
			if err := traffic.Write(w, cfg); err != nil {
				return usageErrorf("gen-logs: %w", err)
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.Uint64Var(&seed, "seed", 1, "random seed; the same seed gives the same log")
	f.IntVar(&lines, "lines", 10000, "number of lines to write")
	f.StringVar(&format, "format", string(traffic.EnvoyJSON), "log format: envoy-json, envoy-text or istio-json")
	f.StringVar(&out, "out", "", "write to this file instead of stdout, - for stdout (gzip-compressed when it ends in .gz)")
	f.StringVar(&start, "start", "", fmt.Sprintf("when the log starts, RFC 3339, 1970 to 8999; its first request is logged just after (default %s)", traffic.DefaultStart.Format(time.RFC3339)))
	f.IntVar(&gateways, "gateways", 4, `gateway nodes named in the "hostname" field, 1 to 1024 (envoy-text logs no hostname)`)
	return cmd
}

// writeLog writes the log cfg describes to w, gzip-compressed when compress is set. The gzip
// header names no file and no time, so the same log gives the same bytes.
func writeLog(w io.Writer, cfg traffic.Config, compress bool) error {
	if !compress {
		return traffic.Write(w, cfg)
	}
	zw := gzip.NewWriter(w)
	if err := traffic.Write(zw, cfg); err != nil {
		return err
	}
	return zw.Close()
}
