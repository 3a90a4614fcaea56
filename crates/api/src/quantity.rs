//! A resource quantity as Kubernetes takes it: `cpu: 2` as well as `cpu: "500m"`. controller-gen
//! renders `resource.Quantity` as int-or-string with the quantity pattern; so does this.

use serde::{Deserialize, Deserializer, Serialize};

use crate::validation::QUANTITY_PATTERN;

/// A quantity in its string form (`2`, `500m`, `1Gi`); a whole number given as a number is kept
/// as its decimal string.
#[derive(Serialize, Clone, Debug, PartialEq, Eq)]
#[serde(transparent)]
pub struct Quantity(pub String);

impl<'de> Deserialize<'de> for Quantity {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Quantity, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Written {
            Text(String),
            Whole(u64),
        }
        Ok(Quantity(match Written::deserialize(deserializer)? {
            Written::Text(text) => text,
            Written::Whole(number) => number.to_string(),
        }))
    }
}

/// int-or-string with the quantity pattern (which applies to the string form) and a rule for the
/// number form.
pub fn quantity_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "x-kubernetes-int-or-string": true,
        "pattern": QUANTITY_PATTERN,
        "x-kubernetes-validations": [{
            "rule": "type(self) != int || self >= 0",
            "message": "a quantity cannot be negative",
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_strings_read_as_their_string_form() {
        let read = |json: &str| serde_json::from_str::<Quantity>(json).unwrap().0;
        assert_eq!(read("2"), "2");
        assert_eq!(read("\"500m\""), "500m");
        assert!(serde_json::from_str::<Quantity>("-1").is_err());
    }
}
