package agent

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The agent only wires (issue 42): its package stays under 2,500 lines
// besides its tests, and no type in it keeps a pointer to the Agent (the
// logic that did lives in the package of its concept).
func TestAgentOnlyWires(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	lines := 0
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		lines += strings.Count(string(b), "\n")
		file, err := parser.ParseFile(fset, f, b, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(file, func(n ast.Node) bool {
			spec, ok := n.(*ast.TypeSpec)
			if !ok || spec.Name.Name == "Agent" {
				return true
			}
			ast.Inspect(spec.Type, func(n ast.Node) bool {
				if star, ok := n.(*ast.StarExpr); ok {
					if id, ok := star.X.(*ast.Ident); ok && id.Name == "Agent" {
						t.Errorf("%s: type %s keeps a pointer to the Agent", fset.Position(star.Pos()), spec.Name.Name)
					}
				}
				return true
			})
			return true
		})
	}
	t.Logf("internal/agent: %d lines besides its tests", lines)
	if lines > 2500 {
		t.Errorf("internal/agent has %d lines besides its tests, more than 2,500: move the logic to the package of its concept", lines)
	}
}
