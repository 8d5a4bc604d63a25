// Calls to an app backend (placeholder).
import APNsCore

