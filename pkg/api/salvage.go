package api

import (
	"encoding/json"
	"errors"
	"strings"
)

// SalvageEndpointContainer reads, from a WorkloadEndpoint record that
// does not decode, the container it was written for (its
// spec.containerID, matched as encoding/json matches field names), or
// "" when the bytes are not JSON or that field cannot be read as a
// string. A field of another type elsewhere in the record is no
// matter. A CNI DEL uses it to tell its own record from a newer
// sandbox's.
func SalvageEndpointContainer(raw []byte) string {
	var rec struct {
		Spec struct {
			ContainerID json.RawMessage `json:"containerID"`
		} `json:"spec"`
	}
	var typeErr *json.UnmarshalTypeError
	if err := json.Unmarshal(raw, &rec); err != nil {
		if !errors.As(err, &typeErr) || typeErr.Field == "spec" || strings.HasPrefix(typeErr.Field, "spec.containerID") {
			return ""
		}
	}
	var id string
	if json.Unmarshal(rec.Spec.ContainerID, &id) != nil {
		return ""
	}
	return id
}
