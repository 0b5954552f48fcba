package buildinfo

import (
	"runtime"
	"runtime/debug"
	"testing"
)

func TestOf(t *testing.T) {
	platform := runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH
	rev := []debug.BuildSetting{{Key: "vcs.revision", Value: "4f9c2e1"}, {Key: "vcs.modified", Value: "true"}}
	tests := []struct {
		version string
		bi      *debug.BuildInfo
		want    string
	}{
		{"", nil, "x dev (" + platform + ")"},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "x dev (" + platform + ")"},
		{"dev", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}}, "x v1.2.3 (" + platform + ")"},
		{"v2.0.0", &debug.BuildInfo{Main: debug.Module{Version: "v1.2.3"}, Settings: rev}, "x v2.0.0 (" + platform + ", revision 4f9c2e1, modified)"},
		{"v2.0.0", &debug.BuildInfo{Settings: rev[:1]}, "x v2.0.0 (" + platform + ", revision 4f9c2e1)"},
	}
	for i, tt := range tests {
		if got := Of(tt.version, tt.bi).Line("x"); got != tt.want {
			t.Errorf("step %d: got %q, want %q", i, got, tt.want)
		}
	}
}
