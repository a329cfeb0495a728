package api

// FelixConfiguration is Calico's FelixConfiguration: "default" for the
// cluster, "node.<name>" for one node.
type FelixConfiguration struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta             `json:"metadata"`
	Spec     FelixConfigurationSpec `json:"spec"`
}

// FelixConfigurationSpec holds the fields of Calico's
// FelixConfigurationSpec that routed honours.
type FelixConfigurationSpec struct{}

// GetKind implements Resource.
func (c *FelixConfiguration) GetKind() Kind { return KindFelixConfiguration }

// Meta implements Resource.
func (c *FelixConfiguration) Meta() *ObjectMeta { return &c.Metadata }

func (c *FelixConfiguration) setDefaults() {}

// Validate implements Resource.
func (c *FelixConfiguration) Validate() error {
	var v errs
	validateMeta(&v, KindFelixConfiguration, &c.Metadata)
	return v.result(KindFelixConfiguration, c.Metadata.Name)
}
