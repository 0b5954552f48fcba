// Package buildinfo describes a build of rlctl's commands for their version output: the
// version stamped at link time, the Go version, the platform and the VCS revision.
package buildinfo

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Info is a build, as `rlctl version -o json` prints it.
type Info struct {
	Version  string `json:"version"`
	Go       string `json:"go"`
	Revision string `json:"revision,omitempty"`
	Modified bool   `json:"modified,omitempty"`
	Platform string `json:"platform"`
}

// Of describes the build of version, stamped at link time, whose build information is bi (nil
// when unknown: a test binary, or a build with -buildvcs=false, records no revision). Without
// a stamp ("" or "dev") the version is the module's, as `go install ...@v1.2.3` records it, or
// else "dev".
func Of(version string, bi *debug.BuildInfo) Info {
	if version == "" || version == "dev" {
		version = "dev"
		if bi != nil && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
	}
	info := Info{Version: version, Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi != nil {
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				info.Revision = s.Value
			case "vcs.modified":
				info.Modified = s.Value == "true"
			}
		}
	}
	return info
}

// Line is the one-line text form for the command name:
// "rlctl v1.2.3 (go1.26.8, linux/amd64, revision 4f9c2e1, modified)".
func (i Info) Line(name string) string {
	rev := ""
	if i.Revision != "" {
		rev = ", revision " + i.Revision
		if i.Modified {
			rev += ", modified"
		}
	}
	return fmt.Sprintf("%s %s (%s, %s%s)", name, i.Version, i.Go, i.Platform, rev)
}
