package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rlctl/rlctl/internal/atomicfile"
	"github.com/rlctl/rlctl/lint"
	"github.com/rlctl/rlctl/render"
	"github.com/rlctl/rlctl/schema"
)

const renderLong = `Render a policy repository as configuration for a consumer.

PATH is a directory of .cue policy files (not its subdirectories; files starting
with '_' or '.' are skipped) or a .cue file, default "."; several paths make one
policy.

Targets (--target) and their output formats (-o, the default first):
%s
A target that writes one file prints it to stdout, or writes it atomically to
FILE with --out FILE. A target that writes several files (one per domain) takes
--out DIR and writes each file into DIR (a name ending in .yaml, .yml or .json that
is not a directory is refused); without --out it prints them to stdout as
one multi-document YAML stream, each document headed by "---" and a
"# file: NAME" comment. The same policy always gives byte-identical output.

What a target cannot express exactly (envoyproxy/ratelimit has no token bucket,
say) is rendered as the nearest equivalent and reported on stderr as an
"approximation", with the rule's file:line:col; what it assumes of the deployment
is reported as an "assumption". With -o json, stderr carries these findings as
one JSON array instead. --strict makes every approximation an error (exit 1,
nothing written).

Policy problems are printed to stderr, one per problem, as the message followed by
its positions (file:line:col) on indented lines, and rlctl exits 1. They include
what the enforcer would refuse to load: limits outside the engine's exact integer
range (lint's RL004). A missing path, a directory without .cue files, an unknown
target or format, or an unwritable --out is a usage or tool error (exit 3).
Exit 0 means the output was written.`

func newRenderCmd() *cobra.Command {
	var target, out string
	var prune bool
	var opts render.Options
	cmd := &cobra.Command{
		Use:   "render --target TARGET [-o FORMAT] [PATH...] [--out FILE|DIR]",
		Short: "Render policies as configuration (" + strings.Join(render.Names(), ", ") + ")",
		Long:  fmt.Sprintf(renderLong, targetHelp()),
		RunE: func(cmd *cobra.Command, args []string) error {
			if target == "" {
				return usageErrorf("render: --target is required: valid targets are %s", strings.Join(render.Names(), ", "))
			}
			t, ok := render.Lookup(target)
			if !ok {
				return usageErrorf("render: unknown target %q: valid targets are %s", target, strings.Join(render.Names(), ", "))
			}
			if opts.Format == "" {
				opts.Format = t.Formats[0]
			}
			if !contains(t.Formats, opts.Format) {
				return usageErrorf("render: unknown output format %q for target %s (want %s)", opts.Format, target, strings.Join(t.Formats, ", "))
			}
			for _, name := range []string{"bootstrap", "rls-cluster", "rls-address"} {
				if cmd.Flags().Changed(name) && target != "envoy" {
					return usageErrorf("render: --%s is a setting of --target envoy", name)
				}
			}
			if prune && (!t.MultiFile || opts.Envoy.Bootstrap || out == "" || out == "-") {
				return usageErrorf("render: --prune takes a several-file target (envoy without --bootstrap, ratelimit) and --out DIR")
			}
			if len(args) == 0 {
				args = []string{"."}
			}
			m, err := schema.Load(args...)
			if err != nil {
				return loadError(cmd.ErrOrStderr(), "render", err)
			}
			// What the enforcer would refuse to load is a policy problem here too.
			if probs := lint.EngineProblems(m); len(probs) > 0 {
				return loadError(cmd.ErrOrStderr(), "render", probs)
			}
			res, err := t.Render(m, opts)
			// --bootstrap makes the envoy target write one file.
			multiFile := t.MultiFile && !opts.Envoy.Bootstrap
			var leftovers []string
			if multiFile && out != "" && out != "-" && err == nil {
				if leftovers, err = t.Leftovers(out, res.Files, opts.Format); err != nil {
					return usageErrorf("render: --out %w", err)
				}
				for _, name := range leftovers {
					f := render.Finding{Severity: render.Assumption, Target: target}
					if prune {
						f.Message = fmt.Sprintf("removes %s, which this render does not write (--prune)", filepath.Join(out, name))
					} else {
						f.Message = fmt.Sprintf("%s was not written by this render (a domain removed or renamed?) and is left as it is: "+
							"whatever reads the directory still loads it; remove it, or render with --prune", filepath.Join(out, name))
					}
					res.Findings = append(res.Findings, f)
				}
			}
			if perr := printRenderFindings(cmd.ErrOrStderr(), opts.Format, res.Findings); perr != nil {
				return usageErrorf("render: %w", perr)
			}
			if errors.Is(err, render.ErrStrict) {
				if opts.Format != "json" {
					// With -o json, stderr is the findings' JSON array alone; exit 1 says the rest.
					fmt.Fprintf(cmd.ErrOrStderr(), "rlctl: render: %v\n", err)
				}
				return findings()
			}
			if err != nil {
				return usageErrorf("render: %w", err)
			}
			if err := writeRendered(cmd.OutOrStdout(), multiFile, out, res.Files); err != nil {
				return err
			}
			if prune {
				for _, name := range leftovers {
					if err := os.Remove(filepath.Join(out, name)); err != nil {
						return usageErrorf("render: --prune: %w", err)
					}
				}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&target, "target", "", "what to render: "+strings.Join(render.Names(), ", "))
	f.StringVarP(&opts.Format, "output", "o", "", "output format (see the targets above; yaml or json where both exist)")
	f.StringVar(&out, "out", "", "write a one-file target to `FILE` (atomically), a several-file target into the `DIR`; - is stdout")
	f.BoolVar(&opts.Strict, "strict", false, "make every approximation an error (exit 1)")
	f.BoolVar(&prune, "prune", false, "with a several-file target and --out DIR: remove the files of DIR that the target writes for a domain (see docs/render.md) and this render did not (a removed or renamed domain's), which are otherwise left and reported")
	f.BoolVar(&opts.Envoy.Bootstrap, "bootstrap", false, "envoy: render a complete static Envoy bootstrap to try locally")
	f.StringVar(&opts.Envoy.ClusterName, "rls-cluster", "rlctl_enforcer", "envoy: the `NAME` of the cluster of the rate limit service (the sidecar)")
	f.StringVar(&opts.Envoy.ClusterAddress, "rls-address", "127.0.0.1:8081", "envoy: the sidecar's gRPC `HOST:PORT`")
	return cmd
}

// targetHelp lists the targets for the command's help, each described in lines of at most 80
// columns.
func targetHelp() string {
	var b strings.Builder
	for _, t := range render.Targets() {
		line := fmt.Sprintf("  %-11s", t.Name)
		for _, w := range strings.Fields("(" + strings.Join(t.Formats, ", ") + ") " + t.Doc) {
			if len(line)+1+len(w) > 80 {
				b.WriteString(line + "\n")
				line = strings.Repeat(" ", 14)
			} else {
				line += " "
			}
			line += w
		}
		b.WriteString(line + "\n")
	}
	return b.String()
}

// printRenderFindings prints a render's findings to stderr: as text, or as one JSON array when
// the output format is json.
func printRenderFindings(stderr io.Writer, format string, fs []render.Finding) error {
	if len(fs) == 0 {
		return nil
	}
	if format == "json" {
		b, err := json.MarshalIndent(fs, "", "  ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(stderr, "%s\n", b)
		return err
	}
	for _, f := range fs {
		if _, err := fmt.Fprintln(stderr, f.String()); err != nil {
			return err
		}
	}
	return nil
}

// writeRendered writes a render's files to --out (a file or a directory) or to stdout.
func writeRendered(stdout io.Writer, multiFile bool, out string, files []render.File) error {
	switch {
	case out == "" || out == "-":
		var buf bytes.Buffer
		if err := render.WriteStream(&buf, files, multiFile); err != nil {
			return usageErrorf("render: %w", err)
		}
		if _, err := stdout.Write(buf.Bytes()); err != nil {
			return usageErrorf("render: %w", err)
		}
	case multiFile:
		// A name like a file's (erl.yaml) that is no directory yet is a file meant: made a
		// directory, the files went where nobody looked.
		if ext := filepath.Ext(out); (ext == ".yaml" || ext == ".yml" || ext == ".json") && !isDir(out) {
			return usageErrorf("render: --out %s: this target writes a file per domain (or several): give a directory, or leave --out out to print them", out)
		}
		if err := render.WriteDir(out, files); err != nil {
			return usageErrorf("render: --out %w", err)
		}
	default:
		if err := atomicfile.Write(out, func(w io.Writer) error { return render.WriteStream(w, files, false) }); err != nil {
			return usageErrorf("render: --out %w", err)
		}
	}
	return nil
}

// isDir reports whether path is a directory now.
func isDir(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.IsDir()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// loadError reports the error schema.Load returned: policy problems are printed as findings (exit
// 1), anything else is a tool error (exit 3).
func loadError(stderr io.Writer, cmdName string, err error) error {
	var probs schema.Problems
	if !errors.As(err, &probs) {
		return usageErrorf("%s: %w", cmdName, err)
	}
	for _, p := range probs {
		fmt.Fprintln(stderr, p.String())
	}
	return findings()
}
