// The Foo rules of fooapi (default, validate, convert) written again in Go over unstructured
// maps, so the benchmark compares the same work: see fooapi/defaults.py, validation.py and
// conversion.py for the contract these follow.
package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	group                = "samplecontroller.k8s.io"
	hubAPIVersion        = group + "/v1"
	legacyAPIVersion     = group + "/v1alpha1"
	conversionAnnotation = group + "/conversion-data"
	minReplicas          = 1
	maxReplicas          = 10
)

type obj = map[string]interface{}

// defaultFoo fills replicas (both versions) and, in v1, the image, in place.
func defaultFoo(o obj, image string) {
	apiVersion, _ := o["apiVersion"].(string)
	spec, ok := o["spec"].(obj)
	if o["spec"] == nil {
		spec, ok = obj{}, true
	}
	if !ok {
		return // a wrongly typed spec is validation's to report
	}
	changed := false
	if spec["replicas"] == nil && (apiVersion == hubAPIVersion || apiVersion == legacyAPIVersion) {
		spec["replicas"] = int64(minReplicas)
		changed = true
	}
	if apiVersion == hubAPIVersion {
		deployment, isMap := spec["deployment"].(obj)
		if spec["deployment"] == nil {
			deployment, isMap = obj{}, true
		}
		if isMap && deployment["image"] == nil {
			deployment["image"] = image
			spec["deployment"] = deployment
			changed = true
		}
	}
	if changed {
		o["spec"] = spec
	}
}

func asInt(v interface{}) (int64, bool) {
	switch n := v.(type) {
	case int64:
		return n, true
	case int:
		return int64(n), true
	case float64:
		if n == float64(int64(n)) {
			return int64(n), true
		}
	case json.Number:
		i, err := n.Int64()
		return i, err == nil
	}
	return 0, false
}

func replicasErrors(path *field.Path, replicas interface{}) field.ErrorList {
	if replicas == nil {
		return nil
	}
	n, ok := asInt(replicas)
	if !ok {
		return field.ErrorList{field.TypeInvalid(path, replicas, "must be an integer")}
	}
	if n < minReplicas {
		return field.ErrorList{field.Invalid(path, n, fmt.Sprintf("must be greater than or equal to %d", minReplicas))}
	}
	if n > maxReplicas {
		return field.ErrorList{field.Invalid(path, n, fmt.Sprintf("must be less than or equal to %d", maxReplicas))}
	}
	return nil
}

func imageErrors(path *field.Path, image interface{}) field.ErrorList {
	if image == nil {
		return nil
	}
	s, ok := image.(string)
	switch {
	case !ok:
		return field.ErrorList{field.TypeInvalid(path, image, "must be a string")}
	case s == "":
		return field.ErrorList{field.Required(path, "image must not be empty when set")}
	case s != strings.TrimSpace(s):
		return field.ErrorList{field.Invalid(path, s, "must not have leading or trailing whitespace")}
	case len(s) > 4096:
		return field.ErrorList{field.TooLong(path, s, 4096)}
	}
	return nil
}

func nameErrors(path *field.Path, name interface{}) field.ErrorList {
	if name == nil || name == "" {
		return field.ErrorList{field.Required(path, "")}
	}
	s, ok := name.(string)
	if !ok {
		return field.ErrorList{field.TypeInvalid(path, name, "must be a string")}
	}
	var errs field.ErrorList
	for _, msg := range validation.IsDNS1123Subdomain(s) {
		errs = append(errs, field.Invalid(path, s, msg))
	}
	return errs
}

// fields returns the deployment name's path and value, and the image's (nil path in v1alpha1).
func fields(o obj) (*field.Path, interface{}, *field.Path, interface{}, field.ErrorList) {
	spec, ok := o["spec"].(obj)
	if o["spec"] == nil {
		spec, ok = obj{}, true
	}
	if !ok {
		return nil, nil, nil, nil, field.ErrorList{field.TypeInvalid(field.NewPath("spec"), o["spec"], "must be an object")}
	}
	if o["apiVersion"] == legacyAPIVersion {
		return field.NewPath("spec", "deploymentName"), spec["deploymentName"], nil, nil, nil
	}
	deployment, ok := spec["deployment"].(obj)
	if spec["deployment"] == nil {
		deployment, ok = obj{}, true
	}
	if !ok {
		return nil, nil, nil, nil, field.ErrorList{field.TypeInvalid(field.NewPath("spec", "deployment"), spec["deployment"], "must be an object")}
	}
	d := field.NewPath("spec", "deployment")
	return d.Child("name"), deployment["name"], d.Child("image"), deployment["image"], nil
}

func validateFoo(newObj, oldObj obj) field.ErrorList {
	apiVersion := newObj["apiVersion"]
	if apiVersion != hubAPIVersion && apiVersion != legacyAPIVersion {
		return field.ErrorList{field.Invalid(field.NewPath("apiVersion"), apiVersion, "must be "+hubAPIVersion+" or "+legacyAPIVersion)}
	}
	namePath, name, imagePath, image, errs := fields(newObj)
	if errs != nil {
		return errs
	}
	spec, _ := newObj["spec"].(obj)
	errs = append(errs, nameErrors(namePath, name)...)
	if imagePath != nil {
		errs = append(errs, imageErrors(imagePath, image)...)
	}
	errs = append(errs, replicasErrors(field.NewPath("spec", "replicas"), spec["replicas"])...)
	if oldObj != nil {
		_, oldName, _, _, shape := fields(oldObj)
		if shape == nil && oldName != nil && oldName != "" && oldName != name {
			errs = append(errs, field.Invalid(namePath, name, "field is immutable"))
		}
	}
	return errs
}

func copyMap(m obj) obj {
	out := make(obj, len(m)+1)
	for k, v := range m {
		out[k] = v
	}
	return out
}

// toHub converts v1alpha1 to v1, taking back what the annotation stashed.
func toHub(o obj) (obj, error) {
	out := copyMap(o)
	out["apiVersion"] = hubAPIVersion
	stash := obj{}
	if metadata, ok := o["metadata"].(obj); ok {
		if annotations, ok := metadata["annotations"].(obj); ok {
			if raw, found := annotations[conversionAnnotation]; found {
				s, _ := raw.(string)
				if err := json.Unmarshal([]byte(s), &stash); err != nil {
					return nil, fmt.Errorf("annotation %s is not valid JSON; remove it", conversionAnnotation)
				}
				rest := copyMap(annotations)
				delete(rest, conversionAnnotation)
				newMetadata := copyMap(metadata)
				if len(rest) > 0 {
					newMetadata["annotations"] = rest
				} else {
					delete(newMetadata, "annotations")
				}
				out["metadata"] = newMetadata
			}
		}
	}
	if spec, ok := o["spec"].(obj); ok {
		spec = copyMap(spec)
		stashed, hasStash := stash["deployment"]
		name, hasName := spec["deploymentName"]
		delete(spec, "deploymentName")
		if hasStash || hasName {
			deployment, ok := stashed.(obj)
			if !ok {
				deployment = obj{}
			}
			deployment = copyMap(deployment)
			if hasName {
				deployment["name"] = name
			}
			spec["deployment"] = deployment
		}
		out["spec"] = spec
	}
	if statusStash, ok := stash["status"].(obj); ok {
		status, isMap := o["status"].(obj)
		if o["status"] == nil || isMap {
			merged := copyMap(statusStash)
			for k, v := range status {
				merged[k] = v
			}
			out["status"] = merged
		}
	}
	return out, nil
}

// fromHub converts v1 to v1alpha1, stashing what v1alpha1 cannot hold.
func fromHub(o obj) (obj, error) {
	out := copyMap(o)
	out["apiVersion"] = legacyAPIVersion
	stash := obj{}
	if spec, ok := o["spec"].(obj); ok {
		if d, found := spec["deployment"]; found {
			spec = copyMap(spec)
			delete(spec, "deployment")
			if deployment, ok := d.(obj); ok {
				name, hasName := deployment["name"]
				if hasName {
					spec["deploymentName"] = name
				}
				rest := copyMap(deployment)
				delete(rest, "name")
				if len(rest) > 0 || !hasName {
					stash["deployment"] = rest
				}
			} else {
				stash["deployment"] = d
			}
			out["spec"] = spec
		}
	}
	if status, ok := o["status"].(obj); ok {
		kept, rest := obj{}, obj{}
		for k, v := range status {
			if k == "availableReplicas" {
				kept[k] = v
			} else {
				rest[k] = v
			}
		}
		if len(rest) > 0 {
			stash["status"] = rest
			out["status"] = kept
		}
	}
	if len(stash) > 0 {
		data, err := json.Marshal(stash) // map keys come out sorted, as fooapi's sort_keys
		if err != nil {
			return nil, err
		}
		metadata, _ := o["metadata"].(obj)
		metadata = copyMap(metadata)
		annotations, _ := metadata["annotations"].(obj)
		annotations = copyMap(annotations)
		annotations[conversionAnnotation] = string(data)
		metadata["annotations"] = annotations
		out["metadata"] = metadata
	}
	return out, nil
}

func convertFoo(o obj, desired string) (obj, error) {
	source, _ := o["apiVersion"].(string)
	if source == desired {
		return o, nil
	}
	var err error
	switch source {
	case legacyAPIVersion:
		if o, err = toHub(o); err != nil {
			return nil, err
		}
	case hubAPIVersion:
	default:
		return nil, fmt.Errorf("cannot convert from apiVersion %q", source)
	}
	switch desired {
	case legacyAPIVersion:
		return fromHub(o)
	case hubAPIVersion:
		return o, nil
	}
	return nil, fmt.Errorf("cannot convert to apiVersion %q", desired)
}
