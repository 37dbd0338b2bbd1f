package verdict

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Numbers as JSON writes them.

// Number is a JSON number that may also be written as the string "-inf",
// "inf", "+inf" or "nan", since JSON has no literal for them.
type Number float64

// UnmarshalJSON accepts a JSON number or one of the strings above.
func (n *Number) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		switch strings.ToLower(s) {
		case "-inf":
			*n = Number(math.Inf(-1))
		case "inf", "+inf":
			*n = Number(math.Inf(1))
		case "nan":
			*n = Number(math.NaN())
		default:
			return fmt.Errorf("number %q: only \"-inf\", \"inf\" and \"nan\" may be strings", s)
		}
		return nil
	}
	var f float64
	if err := json.Unmarshal(b, &f); err != nil {
		return err
	}
	*n = Number(f)
	return nil
}

// MarshalJSON writes infinities and NaN as strings so the output loads again.
func (n Number) MarshalJSON() ([]byte, error) {
	f := float64(n)
	switch {
	case math.IsInf(f, -1):
		return []byte(`"-inf"`), nil
	case math.IsInf(f, 1):
		return []byte(`"inf"`), nil
	case math.IsNaN(f):
		return []byte(`"nan"`), nil
	}
	return []byte(strconv.FormatFloat(f, 'g', -1, 64)), nil
}
