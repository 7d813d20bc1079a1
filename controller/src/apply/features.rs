//! `UpdateFeatures`: the finalized feature levels, changed all or none as
//! `features::update` decides from the image's registrations.

use crate::command::CommandError;
use crate::features::{self, FeatureLevels, FeatureUpdate};
use crate::image::MetadataImage;

impl MetadataImage {
    pub(super) fn update_features(
        &mut self,
        updates: &[FeatureUpdate],
        legacy: &FeatureLevels,
    ) -> Result<(), CommandError> {
        let current = features::effective(&self.features, legacy);
        let brokers = self
            .brokers
            .values()
            .map(|b| (b.id, b.supported_features.as_ref()));
        let next = features::update(current, brokers, updates)
            .map_err(CommandError::InvalidFeatureUpdate)?;
        debug_assert!(next.contains_key(features::METADATA_VERSION));
        self.features = next;
        Ok(())
    }
}
