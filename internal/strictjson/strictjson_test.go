package strictjson

import (
	"encoding/json"
	"errors"
	"testing"
)

type inner struct {
	Name string `json:"name"`
}

type target struct {
	Scope string          `json:"scope"`
	Tags  []string        `json:"tags,omitempty"`
	Inner *inner          `json:"inner"`
	List  []inner         `json:"list"`
	Extra map[string]int  `json:"extra"`
	Raw   json.RawMessage `json:"raw"`
	Plain int
	//lint:ignore U1000 an unexported field Decode must refuse to fill
	hidden int
	Skip   string `json:"-"`
}

func TestDecode(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		want     error // nil: decodes; errSyntax: any other error
	}{
		{"plain", `{"scope":"all"}`, nil},
		{"all fields", `{"scope":"a","tags":["x"],"inner":{"name":"n"},"list":[{"name":"m"}],"extra":{"K":1,"k":2},"raw":{"A":1,"a":2},"Plain":3}`, nil},
		{"escaped name is the same name", `{"sc\u006fpe":"all"}`, nil},
		{"surrogate pair", `{"scope":"\ud83d\ude00 and \uD83D\uDE00"}`, nil},
		{"escaped backslash before u", `{"scope":"\\ud800"}`, nil},
		{"U+FFFD itself", `{"scope":"\ufffd �"}`, nil},
		{"other case", `{"SCOPE":"all"}`, &NameError{Name: "SCOPE"}},
		{"other case nested", `{"inner":{"Name":"n"}}`, &NameError{Name: "Name"}},
		{"other case in a list", `{"list":[{"name":"a"},{"NAME":"b"}]}`, &NameError{Name: "NAME"}},
		{"untagged field in another case", `{"plain":3}`, &NameError{Name: "plain"}},
		{"unexported", `{"hidden":1}`, &NameError{Name: "hidden"}},
		{"dash", `{"Skip":"x"}`, &NameError{Name: "Skip"}},
		{"unknown", `{"format":"csv"}`, &NameError{Name: "format"}},
		{"twice", `{"scope":"conv:zzz","scope":"all"}`, &NameError{Name: "scope", Duplicate: true}},
		{"twice nested", `{"inner":{"name":"a","name":"b"}}`, &NameError{Name: "name", Duplicate: true}},
		{"twice in a map", `{"extra":{"k":1,"k":2}}`, &NameError{Name: "k", Duplicate: true}},
		{"twice in raw", `{"raw":{"a":1,"a":2}}`, &NameError{Name: "a", Duplicate: true}},
		{"lone high surrogate", `{"scope":"\ud800"}`, ErrInvalidText},
		{"lone low surrogate", `{"scope":"x\udc00"}`, ErrInvalidText},
		{"high then not low", `{"scope":"\ud800\u0041"}`, ErrInvalidText},
		{"high at the end", `{"scope":"\ud83d"}`, ErrInvalidText},
		{"surrogate in a name", `{"\ud800":1}`, ErrInvalidText},
		{"invalid UTF-8", "{\"scope\":\"caf\xe9\"}", ErrInvalidText},
		{"malformed", `{"scope":`, errSyntax},
		{"wrong type", `{"scope":5}`, errSyntax},
		{"trailing data", `{"scope":"a"} {}`, errSyntax},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var dst target
			err := Decode([]byte(tc.in), &dst)
			var ne *NameError
			switch want := tc.want.(type) {
			case nil:
				if err != nil {
					t.Fatalf("Decode(%s) = %v", tc.in, err)
				}
			case *NameError:
				if !errors.As(err, &ne) || *ne != *want {
					t.Fatalf("Decode(%s) = %v, want %v", tc.in, err, want)
				}
			default:
				if tc.want == errSyntax {
					if err == nil || errors.Is(err, ErrInvalidText) || errors.As(err, &ne) {
						t.Fatalf("Decode(%s) = %v, want encoding/json's error", tc.in, err)
					}
				} else if !errors.Is(err, tc.want) {
					t.Fatalf("Decode(%s) = %v, want %v", tc.in, err, tc.want)
				}
			}
		})
	}
	var dst target
	if err := Decode([]byte(`{"scope":"\ud83d\ude00","extra":{"K":1,"k":2}}`), &dst); err != nil || dst.Scope != "😀" || dst.Extra["K"] != 1 || dst.Extra["k"] != 2 {
		t.Fatalf("decoded %+v, %v", dst, err)
	}
}

var errSyntax = errors.New("any error of encoding/json")
