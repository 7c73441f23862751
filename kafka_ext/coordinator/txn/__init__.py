"""The transaction coordinator: transactional ids and their state over __transaction_state."""
