/// A scenario file that cannot run: unreadable, not JSON, or a step that does not say what it
/// should. `location` names the place (`step 3 (login)`, `backends.com.example.app`), `field`
/// the field, so the message points at what to fix. The command exits 2 for these.
public struct ScenarioFileError: Error, CustomStringConvertible, Sendable, Equatable {
    public let file: String?
    public let location: String?
    public let field: String?
    public let message: String

    public init(file: String? = nil, location: String? = nil, field: String? = nil, _ message: String) {
        self.file = file
        self.location = location
        self.field = field
        self.message = message
    }

    public var description: String {
        var parts: [String] = []
        if let file { parts.append(file) }
        if let location { parts.append(location) }
        if let field { parts.append("field \"\(field)\"") }
        return parts.isEmpty ? message : parts.joined(separator: ", ") + ": " + message
    }

    func inFile(_ file: String) -> ScenarioFileError {
        ScenarioFileError(file: file, location: location, field: field, message)
    }
}
