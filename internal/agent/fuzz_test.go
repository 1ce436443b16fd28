package agent

import (
	"os"
	"testing"
)

// A configuration file: parsing never panics; what parses has its
// defaults filled.
func FuzzParseConfig(f *testing.F) {
	if b, err := os.ReadFile("../../README.md"); err == nil {
		f.Add(b)
	}
	for _, s := range []string{
		"group \"g\" { builtin = \"demo\" }",
		"data_dir = \"/x\"\nserver { enabled = false }\nhost { join = [\"s:4650\"] }",
		"consul {}\nnomad { stickyd_command = \"/bin/x\"\n archive = \"http://a\" }",
		"gateway {\n model \"m\" {\n concurrency = 1\n deployment \"d\" {\n provider = \"openai\"\n model = \"x\"\n price {\n free = true\n }\n }\n }\n}",
		"group \"g\" {\n builtin = \"demo\"\n governance {\n enabled = true\n compact_below = 0.2\n }\n}",
		"server { bootstrap_expect = 3 }", "{{{", "",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, src []byte) {
		c, err := ParseConfig("fuzz.hcl", src)
		if err == nil && (c.Front == nil || c.Admin == nil || c.Server == nil || c.Probe == nil) {
			t.Fatalf("a parsed configuration lacks its defaults: %+v", c)
		}
	})
}
