package names

import (
	"errors"
	"strings"
	"testing"
)

func TestValidateNodeName(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		errText string // "" for valid
	}{
		{"short", "n1", ""},
		{"fqdn", "cn01.cluster.example.org", ""},
		{"underscore and dash", "gpu_node-7", ""},
		{"digits first", "001", ""},
		{"longest", strings.Repeat("a", 253), ""},
		{"empty", "", "node name is empty"},
		{"too long", strings.Repeat("a", 254), "longer than 253"},
		{"option-like", "-oProxyCommand=x", "starts with '-'"},
		{"blank", "n 1", `character ' ' at offset 1`},
		{"quote", "n'1", `character '\'' at offset 1`},
		{"slash", "../etc", `character '/' at offset 2`},
		{"dot", ".", "a directory's own name"},
		{"dot dot", "..", "a directory's own name"},
		{"dots in a name", "n..1", ""},
		{"brackets", "n[1]", `character '[' at offset 1`},
		{"newline", "n1\nn2", `character '\n' at offset 2`},
		{"non-ASCII", "nœud", `character 'œ' at offset 1`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateNode(tt.in)
			if tt.errText == "" {
				if err != nil {
					t.Fatalf("ValidateNode(%q): %v", tt.in, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.errText) || !errors.Is(err, ErrNode) {
				t.Fatalf("ValidateNode(%q) = %v, want ErrNode containing %q", tt.in, err, tt.errText)
			}
		})
	}
}

func TestValidateJobID(t *testing.T) {
	tests := []struct {
		name  string
		in    string
		valid bool
	}{
		{"slurm", "123", true},
		{"slurm array", "123_4", true},
		{"lsf array", "123[4]", true},
		{"pbs", "123.pbs01.example.org", true},
		{"pbs array", "123[].pbs01", true},
		{"empty", "", false},
		{"option-like", "-1", false},
		{"slash", "1/2", false},
		{"shell", "1$(id)", false},
		{"blank", "1 2", false},
		{"too long", strings.Repeat("1", 256), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ValidateJob(tt.in)
			if got, want := err == nil, tt.valid; got != want {
				t.Fatalf("ValidateJob(%q) = %v, want valid %v", tt.in, err, want)
			}
			if err != nil && !errors.Is(err, ErrJob) {
				t.Fatalf("ValidateJob(%q) = %v, not ErrJob", tt.in, err)
			}
		})
	}
}
