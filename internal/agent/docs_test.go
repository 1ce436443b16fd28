package agent

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsimple"
)

// hclBlock finds the ```hcl blocks of a Markdown file.
var hclBlock = regexp.MustCompile("(?s)```hcl\n(.*?)```")

// Every HCL example in the docs and the README loads: its syntax parses,
// and one that is an agent's configuration (no Nomad job or Terraform
// block in it) decodes into the agent's schema, every field and block a
// real one. (Values are not checked: examples name files that do not
// exist here.)
func TestDocsHCLExamples(t *testing.T) {
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, "../../README.md")
	other := regexp.MustCompile(`(?m)^\s*(job|task|artifact|template|resource|variable|provider|terraform|data|module|output|locals)\b`)
	seen := 0
	for _, f := range files {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range hclBlock.FindAllSubmatch(src, -1) {
			seen++
			name := filepath.Base(f) + "#" + string(rune('1'+i))
			block := m[1]
			if _, diags := hclparse.NewParser().ParseHCL(block, name); diags.HasErrors() {
				t.Errorf("%s does not parse: %s\n%s", name, diags.Error(), block)
				continue
			}
			if other.Match(block) || strings.Contains(string(block), "...") {
				continue
			}
			var c Config
			if err := hclsimple.Decode(name+".hcl", block, nil, &c); err != nil {
				t.Errorf("%s is not an agent configuration: %v\n%s", name, err, block)
			}
		}
	}
	if seen < 10 {
		t.Fatalf("found %d HCL examples; the docs hold more", seen)
	}
}
