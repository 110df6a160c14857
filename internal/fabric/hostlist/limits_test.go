package hostlist

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// hugeRangeInputs ask for ranges whose size, alone or multiplied by the
// names of a following bracket group, does not fit in an int, and one whose
// end is the largest int. Expand must refuse them with ErrSyntax without
// allocating anything.
var hugeRangeInputs = []string{
	"n[0-9223372036854775807]",
	"n[0-4611686018427387904]x[0-1]",
	"n[0-999999999]x[0-999999999]",
	"n[999999999-999999999]",
}

// TestExpandHugeRangeChild is the child half of
// TestExpandRefusesHugeRanges; it only runs when re-executed.
func TestExpandHugeRangeChild(t *testing.T) {
	in := os.Getenv("HOSTLIST_EXPAND_CHILD")
	if in == "" {
		t.Skip("child of TestExpandRefusesHugeRanges")
	}
	names, err := Expand(in)
	fmt.Printf("RESULT names=%d err=%v syntax=%v\n", len(names), err, errors.Is(err, ErrSyntax))
}

// TestExpandRefusesHugeRanges checks that ranges too large to expand are a
// syntax error. Expand runs in a child process limited to 2 GB of address
// space and 5 seconds, so a regression shows as a failure rather than
// exhausting the machine's memory.
func TestExpandRefusesHugeRanges(t *testing.T) {
	if os.Getenv("HOSTLIST_EXPAND_CHILD") != "" {
		return
	}
	for _, in := range hugeRangeInputs {
		t.Run(in, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, "sh", "-c", `ulimit -v 2000000; exec "$0" -test.run='^TestExpandHugeRangeChild$' -test.count=1`, os.Args[0])
			cmd.Env = append(os.Environ(), "HOSTLIST_EXPAND_CHILD="+in, "GOMAXPROCS=1")
			out, err := cmd.CombinedOutput()
			res := ""
			for _, l := range strings.Split(string(out), "\n") {
				if strings.HasPrefix(l, "RESULT ") {
					res = l
				}
			}
			wantSyntax := in != "n[999999999-999999999]"
			if wantSyntax && !strings.Contains(res, "syntax=true") || !wantSyntax && !strings.Contains(res, "names=1 ") {
				tail := string(out)
				if len(tail) > 300 {
					tail = tail[:300] + "..."
				}
				t.Errorf("Expand(%q): ctx %v, exit %v, output %q", in, ctx.Err(), err, tail)
			}
		})
	}
}

// TestExpandNumbersAreDigitsOnly checks that a number in a bracket group is
// 1 to 9 decimal digits: a sign ("node[+1-2]" is a typo, not node01,node02)
// or a tenth digit is a syntax error.
func TestExpandNumbersAreDigitsOnly(t *testing.T) {
	for _, in := range []string{"node[+1-2]", "node[1-+2]", "node[+7]", "node[-1]", "node[1--2]", "node[0000000001]", "node[1-0000000002]"} {
		if names, err := Expand(in); !errors.Is(err, ErrSyntax) {
			t.Errorf("Expand(%q) = %v, %v, want a syntax error", in, names, err)
		}
	}
	for in, want := range map[string]string{"node[000000001-000000002]": "node000000001,node000000002", "n[999999999]": "n999999999"} {
		names, err := Expand(in)
		if err != nil || strings.Join(names, ",") != want {
			t.Errorf("Expand(%q) = %v, %v, want %s", in, names, err, want)
		}
	}
}
