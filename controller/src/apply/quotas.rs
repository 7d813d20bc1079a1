//! Client quotas: `AlterClientQuotas`, applied all or nothing. Refused when an alteration
//! names an entity of no component, or when the quotas would then hold more than
//! `QUOTA_ENTITIES_MAX` entities (every snapshot carries them all).

use crate::command::*;
use crate::image::MetadataImage;

impl MetadataImage {
    pub(super) fn alter_client_quotas(
        &mut self,
        alterations: &[crate::client_quotas::QuotaAlteration],
    ) -> Result<(), CommandError> {
        if alterations.iter().any(|a| a.entity.is_empty()) {
            return Err(CommandError::Invalid(
                "a quota entity names no component".into(),
            ));
        }
        let mut next = self.client_quotas.clone();
        for a in alterations {
            next.apply(a);
        }
        // Every snapshot carries them all: bounded.
        if next.entries.len() > crate::client_quotas::QUOTA_ENTITIES_MAX {
            return Err(CommandError::PolicyViolation(format!(
                "more than {} quota entities",
                crate::client_quotas::QUOTA_ENTITIES_MAX
            )));
        }
        self.client_quotas = next;
        Ok(())
    }
}
