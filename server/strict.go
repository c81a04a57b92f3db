package server

import (
	"encoding/json"
	"errors"

	"github.com/gin-gonic/gin"

	"github.com/ferry-io/ferry/errkind"
	"github.com/ferry-io/ferry/internal/strictjson"
)

// bindStrict binds the body like bindJSON and decodes it with package
// strictjson: member names exactly as declared, none twice, every string
// valid Unicode. For bodies that are identities or kept as given (an
// export request's fingerprint, a chat message), where encoding/json's
// case folding, last-name-wins and silent U+FFFD would make one body mean
// two things. badText is the error for a string that is not valid Unicode;
// nil means invalid_json.
func bindStrict(c *gin.Context, dst any, badText error) error {
	var raw json.RawMessage
	if err := bindJSON(c, &raw); err != nil {
		return err
	}
	err := strictjson.Decode(raw, dst)
	var ne *strictjson.NameError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, strictjson.ErrInvalidText):
		if badText != nil {
			return badText
		}
		return errkind.New(errkind.Invalid, "invalid_json", "%s", strictjson.ErrInvalidText.Error())
	case errors.As(err, &ne):
		return errkind.New(errkind.Invalid, "invalid_json", "%s", ne.Error())
	}
	return errkind.New(errkind.Invalid, "invalid_json", "%s", describeJSONError(err))
}
