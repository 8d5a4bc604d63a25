// Scenarios: scenario files (docs/scenarios.md) parsed and run against an emulator, one the
// runner starts in this process or one already running. Imports AdminClient, EmulatorServer
// (for the in-process emulator), ProviderClient and HTTP2, HTTP1Client, APNsCore and Foundation.

public import APNsCore

/// A scenario file, checked: devices, accounts, pushes and waits as data (docs/scenarios.md).
/// Strings still hold their `${…}` references; they are filled in when a step runs.
public struct Scenario: Sendable {
    public var name: String
    public var description: String?
    /// The app devices get unless a step names another.
    public var bundleID: String
    /// `${NAME}` values: those given to the parser (`--var`, the environment) over the file's
    /// `variables` defaults.
    public var variables: [String: String]
    /// `PUT /api/v1/apps/{bundleId}/backend` bodies, sent before the first step.
    public var backends: [(bundleID: String, backend: JSONValue)]
    /// More `apns-emulator serve` options for the emulator the runner starts itself.
    public var emulatorArguments: [String]
    /// Cross-account deliveries the scenario expects to provoke (0 unless it says so).
    public var expectedCrossAccount: Int
    public var steps: [Step]

    /// Every app a device or backend of the scenario names (the in-process emulator's apps).
    public var bundleIDs: [String] {
        var seen: [String] = [bundleID]
        for entry in backends where !seen.contains(entry.bundleID) { seen.append(entry.bundleID) }
        for step in steps {
            if let bundle = step.fields["bundleId"]?.stringValue, !bundle.contains("${"), !seen.contains(bundle) { seen.append(bundle) }
        }
        return seen
    }
}

/// One step: its kind and fields as written.
public struct Step: Sendable {
    /// 1-based, as the report numbers it.
    public var index: Int
    public var kind: StepKind
    /// Every field of the step object (`do`, `name` and `save` included).
    public var fields: JSONObject
    /// `save`: variable name → template, in file order.
    public var save: [(name: String, template: String)]
    /// The device alias the step acts on, resolved when the file was read (the only device
    /// when the step did not name one).
    public var deviceAlias: String?

    public var name: String? { fields["name"]?.stringValue }

    /// `step 3 (login)`: where error messages point.
    public var location: String { "step \(index) (\(kind.rawValue))" }
}
