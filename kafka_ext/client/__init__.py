"""Client-side helpers of kafka-ext (the extension-aware client grows here)."""
