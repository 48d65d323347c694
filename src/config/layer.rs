//! One configuration layer, read once, and the rule for sections tagged by `kind`: a layer that
//! switches a section to another kind starts that section afresh, dropping what lower layers set.

use figment::value::{Dict, Map};
use figment::{Error, Figment, Metadata, Profile, Provider};

/// A layer's data, read once from its provider (so every look at it sees the same values), minus
/// the sections a higher layer's switch of kind has dropped. It keeps the provider's metadata, so
/// errors still name the layer the offending key came from.
pub(super) struct Layer {
    metadata: Metadata,
    profile: Option<Profile>,
    data: Result<Map<Profile, Dict>, Error>,
    dropped: Vec<&'static str>,
}

impl Layer {
    /// Reads `provider` once; a read error is kept and reported when the layers are extracted.
    pub(super) fn read(provider: impl Provider) -> Self {
        Layer {
            metadata: provider.metadata(),
            profile: provider.profile(),
            data: provider.data(),
            dropped: Vec::new(),
        }
    }

    /// The kind this layer sets for `section`, if it sets one as a string (any other value is
    /// left to deserialization, which names it).
    fn kind(&self, section: &str) -> Option<String> {
        Figment::from(self)
            .extract_inner(&format!("{section}.kind"))
            .ok()
    }
}

impl Provider for Layer {
    fn metadata(&self) -> Metadata {
        self.metadata.clone()
    }

    fn data(&self) -> Result<Map<Profile, Dict>, Error> {
        let mut data = self.data.clone()?;
        for dict in data.values_mut() {
            for section in &self.dropped {
                dict.remove(*section);
            }
        }
        Ok(data)
    }

    fn profile(&self) -> Option<Profile> {
        self.profile.clone()
    }
}

/// Applies the kind rule to `layers` (lowest first; the first holds the built-in defaults) for
/// each of `sections`: where a layer sets a kind other than the one in force below it, the
/// section restarts there, so every lower layer's keys of that section are dropped. The built-in
/// defaults are kept when the final kind is theirs: they are that kind's defaults. Setting the
/// kind in force again is no switch and drops nothing.
pub(super) fn restart_switched_kinds(layers: &mut [Layer], sections: &[&'static str]) {
    for &section in sections {
        let kinds: Vec<Option<String>> = layers.iter().map(|l| l.kind(section)).collect();
        let mut in_force: Option<&String> = None;
        let mut start = 0;
        for (i, kind) in kinds.iter().enumerate() {
            if let Some(kind) = kind {
                if in_force != Some(kind) {
                    if in_force.is_some() {
                        start = i;
                    }
                    in_force = Some(kind);
                }
            }
        }
        for (i, layer) in layers[..start].iter_mut().enumerate() {
            let defaults_of_final_kind = i == 0 && kinds[0].as_ref() == in_force;
            if !defaults_of_final_kind {
                layer.dropped.push(section);
            }
        }
    }
}

/// The layers merged in order, each over the ones before it.
pub(super) fn merged(layers: &[Layer]) -> Figment {
    layers
        .iter()
        .fold(Figment::new(), |figment, layer| figment.merge(layer))
}

#[cfg(test)]
mod tests {
    use super::*;
    use figment::providers::{Format, Toml};

    fn layers(texts: &[&str]) -> Vec<Layer> {
        texts.iter().map(|t| Layer::read(Toml::string(t))).collect()
    }

    fn model(layers: &[Layer]) -> toml::Table {
        merged(layers).extract_inner("model").unwrap()
    }

    #[test]
    fn a_switch_drops_the_section_below_and_keeps_it_beside_and_above() {
        let mut l = layers(&[
            "model = { kind = \"mlp\", hidden = [64] }",
            "model = { hidden = [128], extra = 1 }",
            "model = { name = \"vgg16\", kind = \"profile\" }",
            "model = { batch_norm = true }",
            "optimizer = { lr = 0.5 }",
        ]);
        restart_switched_kinds(&mut l, &["model", "optimizer"]);
        let m = model(&l);
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        assert_eq!(keys, ["batch_norm", "kind", "name"]);
        // No kind anywhere for the optimizer: nothing is dropped.
        let lr: f64 = merged(&l).extract_inner("optimizer.lr").unwrap();
        assert_eq!(lr, 0.5);
    }

    #[test]
    fn the_same_kind_again_is_no_switch() {
        let mut l = layers(&[
            "model = { kind = \"mlp\", hidden = [64] }",
            "model = { kind = \"mlp\", hidden = [128] }",
            "model = { kind = \"mlp\" }",
        ]);
        restart_switched_kinds(&mut l, &["model"]);
        assert_eq!(model(&l)["hidden"], toml::Value::Array(vec![128.into()]));
    }

    #[test]
    fn switching_back_to_the_default_kind_starts_from_the_built_in_defaults() {
        let mut l = layers(&[
            "model = { kind = \"mlp\", hidden = [64] }",
            "model = { kind = \"cnn\", channels = [4] }",
            "model = { kind = \"mlp\" }",
        ]);
        restart_switched_kinds(&mut l, &["model"]);
        let m = model(&l);
        assert_eq!(m.len(), 2, "{m:?}");
        assert_eq!(m["hidden"], toml::Value::Array(vec![64.into()]));
    }

    #[test]
    fn a_later_switch_drops_an_earlier_one() {
        let mut l = layers(&[
            "model = { kind = \"mlp\", hidden = [64] }",
            "model = { kind = \"cnn\", channels = [4] }",
            "model = { kind = \"vgg-like\", dense = 8 }",
        ]);
        restart_switched_kinds(&mut l, &["model"]);
        let m = model(&l);
        let keys: Vec<&str> = m.keys().map(String::as_str).collect();
        assert_eq!(keys, ["dense", "kind"]);
    }
}
