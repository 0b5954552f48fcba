// Command enforcerdocs writes rlctl-enforcer's generated documentation: its reference page
// (docs/cli/rlctl-enforcer.md, from its --help) and the metric list in docs/enforcer.md (from the
// registry of a running enforcer). `make docs` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/rlctl/rlctl/internal/docgen"
)

func main() {
	cli := flag.String("cli", "docs/cli", "directory of the command pages")
	doc := flag.String("doc", "docs/enforcer.md", "document holding the generated metric list")
	policies := flag.String("policies", "policies", "policy the enforcer loads while its metrics are listed")
	flag.Parse()
	if err := docgen.WriteEnforcerDocs(context.Background(), *cli, *doc, *policies); err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", filepath.Base(os.Args[0]), err)
		os.Exit(1)
	}
}
