//! The one [`rath_persist::SessionStore`] implementation of both SQL stores: each method
//! hands the store's pool, load batcher, name and known sessions to the store logic its
//! module instantiated (`imp`, see [`crate::core::sql_store!`]).

/// Implements `SessionStore` for `$ty` (a store type with `pool`, `loads`, `name`, `known`
/// and `group` fields and an `imp` module beside it) by delegation to `imp`.
macro_rules! session_store {
    ($ty:ty) => {
        #[async_trait::async_trait]
        impl rath_persist::SessionStore for $ty {
            fn name(&self) -> String {
                self.name.clone()
            }

            fn capabilities(&self) -> Capabilities {
                crate::SQL_CAPABILITIES
            }

            async fn write(&self, batch: WriteBatch<'_>) -> Result<Vec<WriteReport>, PersistError> {
                imp::write(&self.group, &self.pool, &self.name, &self.known, batch).await
            }

            async fn load(&self, id: &SessionId) -> Result<LoadedSession, PersistError> {
                imp::load(&self.pool, &self.loads, &self.name, &self.known, id).await
            }

            async fn stored_len(&self, id: &SessionId) -> Result<Option<usize>, PersistError> {
                imp::stored_len(&self.pool, &self.name, id).await
            }

            async fn known_to_extend(
                &self,
                id: &SessionId,
                prefix: &SessionId,
            ) -> Result<bool, PersistError> {
                imp::known_to_extend(&self.pool, &self.name, id, prefix).await
            }

            async fn read_chunks(
                &self,
                id: &SessionId,
                range: std::ops::Range<usize>,
            ) -> Result<Vec<rath_session::Chunk>, PersistError> {
                imp::read_chunks(&self.pool, &self.name, id, range).await
            }

            async fn chunk_docs(
                &self,
                id: &SessionId,
            ) -> Result<Vec<rath_persist::StoredDoc>, PersistError> {
                imp::chunk_docs(&self.pool, &self.name, id).await
            }

            async fn replace_chunk_doc(&self, old: &[u8], new: &[u8]) -> Result<u64, PersistError> {
                imp::replace_chunk_doc(&self.pool, &self.name, old, new).await
            }

            async fn revision(&self, id: &SessionId) -> Result<Option<Vec<u8>>, PersistError> {
                imp::revision(&self.pool, &self.name, id).await
            }

            async fn list(&self) -> Result<Vec<SessionSummary>, PersistError> {
                imp::list(&self.pool, &self.name).await
            }

            async fn delete(&self, id: &SessionId) -> Result<bool, PersistError> {
                imp::delete(&self.pool, &self.name, &self.known, id).await
            }

            async fn gc(&self) -> Result<GcReport, PersistError> {
                imp::gc(&self.pool, &self.name).await
            }
        }
    };
}
pub(crate) use session_store;
