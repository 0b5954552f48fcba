package main

import (
	"errors"
	"fmt"
	"strings"
)

// Exit codes are public API: CI systems branch on them. Never renumber one.
const (
	// ExitClean means the command ran and found nothing.
	ExitClean = 0
	// ExitFindings means findings: lint errors (or warnings with --fail-on-warn), a simulation
	// over its threshold, a failed gate or a failed policy test.
	ExitFindings = 1
	// ExitDifference means rlctl diff --exit-code found changes between the two versions.
	ExitDifference = 2
	// ExitUsage means a usage or tool error: a bad flag, a missing path, an unwritable file.
	ExitUsage = 3
)

// exitError carries an exit code out of a command. A nil err means the command has already said
// everything it had to say.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// findings returns the error a command returns when it printed findings.
func findings() error { return &exitError{code: ExitFindings} }

// usageErrorf returns a usage or tool error.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// settingErrors is a usage error that reports every bad setting of command at once, a line
// each ("rlctl: simulate: --top -1: ..."), or nil when errs is empty. An error that joins
// several (errors.Join) gives a line to each.
func settingErrors(command string, errs []error) error {
	var lines []string
	var add func(err error)
	add = func(err error) {
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				add(e)
			}
			return
		}
		lines = append(lines, command+": "+err.Error())
	}
	for _, err := range errs {
		add(err)
	}
	if len(lines) == 0 {
		return nil
	}
	// Main prefixes the message with "rlctl: "; every line gets the prefix.
	return usageErrorf("%s", strings.Join(lines, "\nrlctl: "))
}

// exitCode maps an error returned by a command onto the process exit code.
func exitCode(err error) int {
	if err == nil {
		return ExitClean
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return ExitUsage
}
