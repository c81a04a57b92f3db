package strictjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ErrInvalidText means a string of the body is not valid Unicode: it has
// invalid UTF-8 or an escaped surrogate without its pair.
var ErrInvalidText = errors.New("a string is not valid Unicode text (invalid UTF-8 or an unpaired \\u surrogate escape)")

// NameError is an object member name that is not exactly a field of the
// target, or that appears twice in one object.
type NameError struct {
	Name      string
	Duplicate bool
}

func (e *NameError) Error() string {
	if e.Duplicate {
		return fmt.Sprintf("field %q appears twice", e.Name)
	}
	return fmt.Sprintf("unknown field %q (field names are exact, case included)", e.Name)
}

// Decode decodes data, one JSON value, into dst (a pointer). It fails with
// ErrInvalidText, a *NameError, or encoding/json's error for malformed
// JSON, a value of the wrong type or trailing data.
func Decode(data []byte, dst any) error {
	if !json.Valid(data) {
		return decodeStd(data, dst) // encoding/json's own syntax error
	}
	if err := checkText(data); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := checkNames(dec, reflect.TypeOf(dst)); err != nil {
		return err
	}
	return decodeStd(data, dst)
}

func decodeStd(data []byte, dst any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(dst); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("unexpected data after the JSON value")
	}
	return nil
}

// checkText checks the strings of valid JSON text: UTF-8 throughout, and
// every \u escape of a surrogate half followed by the other half.
func checkText(data []byte) error {
	if !utf8.Valid(data) {
		return ErrInvalidText
	}
	in := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c == '\\':
			if data[i+1] != 'u' {
				i++ // a one-character escape
				continue
			}
			r := hex4(data[i+2 : i+6])
			i += 5
			switch {
			case r >= 0xDC00 && r <= 0xDFFF:
				return ErrInvalidText // a low half alone
			case r >= 0xD800 && r <= 0xDBFF:
				if i+6 >= len(data) || data[i+1] != '\\' || data[i+2] != 'u' {
					return ErrInvalidText
				}
				if lo := hex4(data[i+3 : i+7]); lo < 0xDC00 || lo > 0xDFFF {
					return ErrInvalidText
				}
				i += 6
			}
		}
	}
	return nil
}

// hex4 reads four hex digits, which valid JSON guarantees after \u.
func hex4(b []byte) rune {
	v, _ := strconv.ParseUint(string(b), 16, 32)
	return rune(v)
}

// checkNames reads one value from dec and checks the member names of its
// objects against t, the Go type it decodes into: exactly a field's JSON
// name for a struct, never twice in one object. Below a map, an interface
// or a json.RawMessage names are free, but still never twice.
func checkNames(dec *json.Decoder, t reflect.Type) error {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	tok, err := dec.Token()
	if err != nil {
		return err
	}
	switch tok {
	case json.Delim('{'):
		var fields map[string]reflect.Type
		if t != nil && t.Kind() == reflect.Struct {
			fields = jsonFields(t)
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				return err
			}
			name := tok.(string)
			if seen[name] {
				return &NameError{Name: name, Duplicate: true}
			}
			seen[name] = true
			var ft reflect.Type
			switch {
			case fields != nil:
				var ok bool
				if ft, ok = fields[name]; !ok {
					return &NameError{Name: name}
				}
			case t != nil && t.Kind() == reflect.Map:
				ft = t.Elem()
			}
			if err := checkNames(dec, ft); err != nil {
				return err
			}
		}
	case json.Delim('['):
		var et reflect.Type
		if t != nil && (t.Kind() == reflect.Slice || t.Kind() == reflect.Array) {
			et = t.Elem()
		}
		for dec.More() {
			if err := checkNames(dec, et); err != nil {
				return err
			}
		}
	default:
		return nil // a scalar
	}
	_, err = dec.Token() // the closing delimiter
	return err
}

var unmarshaler = reflect.TypeFor[json.Unmarshaler]()

// jsonFields maps the JSON names of struct t's fields, as encoding/json
// would write them, to the fields' types. A field that decodes itself
// (json.RawMessage, an Unmarshaler) maps to nil: its names are its own.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" || (!f.IsExported() && !f.Anonymous) {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		ft := f.Type
		if ft.Implements(unmarshaler) || reflect.PointerTo(ft).Implements(unmarshaler) {
			ft = nil
		}
		out[name] = ft
	}
	return out
}
