package mutate

import (
	"strings"

	"github.com/valyala/fastjson"
)

// readDepth is how deep wavegate reads a review: an object or array nested deeper than that (under
// the AdmissionReview) is read as null. Every field wavegate reads (metadata, pod templates down to
// a CronJob's gates, a pod's volumes) lies within a dozen levels.
const readDepth = 64

// parseDeep parses a review or an object. The API server stores custom resources nested deeper than
// the parser's limit (fastjson.MaxDepth, 300 levels; the API server's own is 10,000): such a
// document is parsed again with what lies below readDepth left out, so that it is admitted like any
// other instead of being denied as not JSON. Anything else that does not parse is an error.
func parseDeep(p *fastjson.Parser, b []byte) (*fastjson.Value, error) {
	v, err := p.ParseBytes(b)
	if err != nil && strings.Contains(err.Error(), "too big depth") {
		return p.ParseBytes(pruneDeep(b, readDepth))
	}
	return v, err
}

// pruneDeep returns the JSON document b with every object and array nested deeper than depth
// replaced by null; the rest is copied as it is (strings included, whatever brackets they hold).
// What is not JSON stays so where it is not left out.
func pruneDeep(b []byte, depth int) []byte {
	out := make([]byte, 0, len(b))
	level, skipping := 0, 0 // skipping: the level of the value being left out; 0: none
	inString, escaped := false, false
	for _, c := range b {
		keep := skipping == 0
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString = false
			}
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			level++
			if level > depth && skipping == 0 {
				skipping, keep = level, false
				out = append(out, "null"...)
			}
		case c == '}' || c == ']':
			if level == skipping {
				skipping = 0
			}
			level--
		}
		if keep {
			out = append(out, c)
		}
	}
	return out
}
