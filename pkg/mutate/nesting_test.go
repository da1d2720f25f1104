package mutate

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/valyala/fastjson"
)

func TestPruneDeep(t *testing.T) {
	for name, tc := range map[string]struct {
		in    string
		depth int
		want  string
	}{
		"shallow enough":            {`{"a":{"b":[1,2]}}`, 3, `{"a":{"b":[1,2]}}`},
		"an object too deep":        {`{"a":{"b":{"c":1}},"d":2}`, 2, `{"a":{"b":null},"d":2}`},
		"an array too deep":         {`{"a":[[1,[2]],3]}`, 2, `{"a":[null,3]}`},
		"brackets in strings":       {`{"a":"{[","b":{"c":"]}"}}`, 1, `{"a":"{[","b":null}`},
		"escaped quotes in strings": {`{"a":"x\"{","b":{"c":"\\"}}`, 1, `{"a":"x\"{","b":null}`},
		"strings inside what goes":  {`{"a":{"b":"}\"]"},"c":"{"}`, 1, `{"a":null,"c":"{"}`},
		"not JSON stays not JSON":   {`{"a":[1,,]`, 3, `{"a":[1,,]`},
		"nothing below the top":     {`[1,"x",true]`, 0, `null`},
		"several values at a level": {`[{"a":1},{"b":{}}]`, 1, `[null,null]`},
	} {
		if d := cmp.Diff(tc.want, string(pruneDeep([]byte(tc.in), tc.depth))); d != "" {
			t.Errorf("%s (-want +got):\n%s", name, d)
		}
	}
}

// TestParseReadsDeeplyNestedDocuments: a document nested deeper than the parser's limit is read
// with its deep parts left out; its shallow fields are all there. Garbage is still an error.
func TestParseReadsDeeplyNestedDocuments(t *testing.T) {
	deep := `{"metadata":{"name":"tree","labels":{"wavegate.io/group":"config"}},"spec":` +
		strings.Repeat(`{"child":`, 1000) + `"leaf"` + strings.Repeat(`}`, 1000) + `}`
	var p fastjson.Parser
	if _, err := p.Parse(deep); err == nil {
		t.Fatal("the parser reads 1,000 levels: the test shows nothing")
	}
	v, err := parseDeep(&p, []byte(deep))
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if got := string(v.GetStringBytes("metadata", "labels", "wavegate.io/group")); got != "config" {
		t.Errorf("the group label: %q, want config", got)
	}
	if _, err := parseDeep(&p, []byte(`{"a":`+strings.Repeat("[", 400))); err == nil {
		t.Error("garbage nested deep parsed")
	}
}
