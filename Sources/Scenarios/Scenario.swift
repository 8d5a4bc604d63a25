// Scenario files (placeholder).
import APNsCore

