package deploy

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/rlctl/rlctl/enforcer"
)

// dockerInstr is one Dockerfile instruction, continuation lines joined.
type dockerInstr struct {
	line int    // where it starts
	cmd  string // upper-cased: FROM, RUN, ...
	args string
}

// dockerStage is one FROM and the instructions after it.
type dockerStage struct {
	from, name string
	instrs     []dockerInstr
}

// parseDockerfile splits a Dockerfile into stages. It is a line-based reading, enough for a
// conventional file: comments, continuation lines ending in '\', one instruction per line.
func parseDockerfile(src string) ([]dockerStage, error) {
	var stages []dockerStage
	var cur strings.Builder
	start := 0
	var instrs []dockerInstr
	for i, line := range strings.Split(src, "\n") {
		t := strings.TrimSpace(line)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if strings.HasPrefix(t, "#") {
			continue // a comment inside a continued instruction
		}
		if body, ok := strings.CutSuffix(t, `\`); ok {
			cur.WriteString(body + " ")
			continue
		}
		cur.WriteString(t)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		instrs = append(instrs, dockerInstr{line: start, cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur.Reset()
	}
	if cur.Len() > 0 {
		return nil, fmt.Errorf("deploy: line %d: continued instruction at end of file", start)
	}
	for _, in := range instrs {
		if in.cmd == "FROM" {
			f := strings.Fields(in.args)
			s := dockerStage{from: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.name = f[2]
			}
			stages = append(stages, s)
			continue
		}
		if len(stages) == 0 {
			if in.cmd == "ARG" {
				continue
			}
			return nil, fmt.Errorf("deploy: line %d: %s before FROM", in.line, in.cmd)
		}
		stages[len(stages)-1].instrs = append(stages[len(stages)-1].instrs, in)
	}
	return stages, nil
}

// args returns the arguments of every instruction cmd in s.
func (s dockerStage) args(cmd string) []string {
	var out []string
	for _, in := range s.instrs {
		if in.cmd == cmd {
			out = append(out, in.args)
		}
	}
	return out
}

// env returns the stage's ENV settings (KEY=VALUE form, values without spaces).
func (s dockerStage) env() map[string]string {
	env := map[string]string{}
	for _, a := range s.args("ENV") {
		for _, kv := range strings.Fields(a) {
			if k, v, ok := strings.Cut(kv, "="); ok {
				env[k] = strings.Trim(v, `"`)
			}
		}
	}
	return env
}

// registryHost matches an image reference whose first path element names a registry host (it
// has a dot or a port, or is localhost): the project writes image names without one.
var registryHost = regexp.MustCompile(`^(?:[^/]*[.:][^/]*|localhost)/`)

// TestDockerfile checks the Dockerfile against the enforcer it packages: a static build of both
// binaries stamped with the version, a scratch image with CA certificates running as a non-root
// user, rlctl-enforcer as the entrypoint, the enforcer's default ports exposed, and addresses
// that the enforcer accepts and that listen beyond loopback.
func TestDockerfile(t *testing.T) {
	src, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages, err := parseDockerfile(string(src))
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 {
		t.Fatalf("got %d stages, want 2 (build, then the image)", len(stages))
	}
	build, final := stages[0], stages[1]
	for _, s := range stages {
		if registryHost.MatchString(s.from) {
			t.Errorf("FROM %s: name the image without a registry host", s.from)
		}
	}
	if !strings.HasPrefix(build.from, "golang:1.26") || build.name == "" {
		t.Errorf("build stage: got FROM %s AS %q, want golang:1.26 and a stage name", build.from, build.name)
	}

	t.Run("build", func(t *testing.T) {
		var goBuild string
		for _, r := range build.args("RUN") {
			if strings.Contains(r, "go build") {
				goBuild = r
			}
		}
		if goBuild == "" {
			t.Fatal("no RUN go build in the build stage")
		}
		static := build.env()["CGO_ENABLED"] == "0" || strings.Contains(goBuild, "CGO_ENABLED=0")
		if !static {
			t.Error("the build does not set CGO_ENABLED=0: the binaries would not be static")
		}
		for _, want := range []string{"-trimpath", "-X main.version=${VERSION}", "./cmd/rlctl-enforcer", "./cmd/rlctl "} {
			if !strings.Contains(goBuild+" ", want) {
				t.Errorf("go build: got %q, want it to contain %q", goBuild, want)
			}
		}
	})

	t.Run("image", func(t *testing.T) {
		if final.from != "scratch" {
			t.Errorf("final stage: got FROM %s, want scratch", final.from)
		}
		copies := strings.Join(final.args("COPY"), "\n")
		certs := "--from=" + build.name + " /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt"
		if !strings.Contains(copies, certs) {
			t.Errorf("the image lacks CA certificates: want COPY %s", certs)
		}
		users := final.args("USER")
		if len(users) != 1 {
			t.Fatalf("got USER %q, want one", users)
		}
		uid, gid, _ := strings.Cut(users[0], ":")
		u, uerr := strconv.Atoi(uid)
		g, gerr := strconv.Atoi(gid)
		if uerr != nil || gerr != nil || u == 0 || g == 0 {
			t.Errorf("USER %s: want a numeric non-root uid:gid, so that runAsNonRoot can check it", users[0])
		}
		for _, l := range []string{"title", "description", "version", "source"} {
			if !strings.Contains(strings.Join(final.args("LABEL"), " "), "org.opencontainers.image."+l+"=") {
				t.Errorf("no LABEL org.opencontainers.image.%s", l)
			}
		}
	})

	t.Run("entrypoint", func(t *testing.T) {
		eps := final.args("ENTRYPOINT")
		if len(eps) != 1 {
			t.Fatalf("got ENTRYPOINT %q, want one", eps)
		}
		var argv []string
		if err := json.Unmarshal([]byte(eps[0]), &argv); err != nil || len(argv) != 1 {
			t.Fatalf("ENTRYPOINT %s: want the exec form with the binary alone (%v)", eps[0], err)
		}
		if path.Base(argv[0]) != "rlctl-enforcer" {
			t.Errorf("ENTRYPOINT: got %s, want rlctl-enforcer", argv[0])
		}
		copied := false
		for _, c := range final.args("COPY") {
			f := strings.Fields(c)
			dst := f[len(f)-1]
			if slices.Contains(f, "/out/rlctl-enforcer") && (dst == argv[0] || strings.HasSuffix(dst, "/") && dst+"rlctl-enforcer" == argv[0]) {
				copied = true
			}
		}
		if !copied {
			t.Errorf("ENTRYPOINT %s: no COPY puts rlctl-enforcer there", argv[0])
		}
	})

	t.Run("ports", func(t *testing.T) {
		exposed := strings.Fields(strings.Join(final.args("EXPOSE"), " "))
		// The image's environment, as the enforcer reads it, with only --config given: the
		// addresses it listens on must parse, be the ports exposed, and not be loopback.
		env := final.env()
		c, err := enforcer.ParseArgs([]string{"--config=/etc/rlctl/snapshot.json"}, func(k string) string { return env[k] }, io.Discard)
		if err != nil {
			t.Fatalf("the enforcer rejects the image's environment: %v", err)
		}
		for _, a := range []struct{ flag, def, got string }{
			{"--grpc-addr", enforcer.DefaultGRPCAddr, c.GRPCAddr},
			{"--admin-addr", enforcer.DefaultAdminAddr, c.AdminAddr},
		} {
			_, defPort, err := net.SplitHostPort(a.def)
			if err != nil {
				t.Fatal(err)
			}
			host, port, err := net.SplitHostPort(a.got)
			if err != nil {
				t.Errorf("%s: %v", a.flag, err)
				continue
			}
			if port != defPort {
				t.Errorf("%s: the image listens on port %s, want the enforcer's default %s", a.flag, port, defPort)
			}
			if !slices.Contains(exposed, defPort) && !slices.Contains(exposed, defPort+"/tcp") {
				t.Errorf("%s: port %s is not in EXPOSE %v", a.flag, defPort, exposed)
			}
			if ip := net.ParseIP(host); host == "localhost" || ip != nil && ip.IsLoopback() {
				t.Errorf("%s: the image listens on %s, which nothing outside the container reaches", a.flag, a.got)
			}
		}
	})
}

func TestParseDockerfile(t *testing.T) {
	src := "ARG X=1\n# c\nFROM golang:1.26 AS build\nRUN a \\\n  # inside\n  b\nFROM scratch\nENV A=1 \\\n    B=\"2\"\nUSER 1:1\n"
	stages, err := parseDockerfile(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) != 2 || stages[0].name != "build" || stages[1].from != "scratch" {
		t.Fatalf("got stages %+v", stages)
	}
	if got, want := stages[0].args("RUN"), []string{"a  b"}; !slices.Equal(got, want) {
		t.Errorf("got RUN %q, want %q", got, want)
	}
	if got := stages[1].env(); got["A"] != "1" || got["B"] != "2" {
		t.Errorf("got ENV %v, want A=1 B=2", got)
	}
	if _, err := parseDockerfile("RUN x\n"); err == nil {
		t.Error("RUN before FROM: got no error")
	}
	for ref, want := range map[string]bool{"golang:1.26": false, "library/golang": false,
		"example.com/x": true, "localhost/x": true, "host:5000/x": true} {
		if got := registryHost.MatchString(ref); got != want {
			t.Errorf("%s: got registry host %v, want %v", ref, got, want)
		}
	}
}
