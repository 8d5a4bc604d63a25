import APNsCore
import Foundation

/// A step's fields once its `${…}` references are filled in, read with the type the catalog
/// gives them. A substituted value of the wrong type (`"count": "${N}"` with N=abc) fails the
/// step with the field's name.
struct StepFields {
    let object: JSONObject

    subscript(_ name: String) -> JSONValue? {
        guard let value = object[name], value != .null else { return nil }
        return value
    }

    func string(_ name: String) -> String? {
        guard let value = self[name] else { return nil }
        return ScenarioParser.scalarText(value)
    }

    func requiredString(_ name: String) throws(StepFailure) -> String {
        guard let text = string(name) else { throw StepFailure("\"\(name)\" is required") }
        return text
    }

    func double(_ name: String) throws(StepFailure) -> Double? {
        guard let value = self[name] else { return nil }
        if let number = value.numberValue { return number }
        if let text = value.stringValue, let number = Double(text.trimmingCharacters(in: .whitespaces)) { return number }
        throw StepFailure("\"\(name)\" must be a number, not \(value.serialized())")
    }

    func int(_ name: String) throws(StepFailure) -> Int? {
        guard let number = try double(name) else { return nil }
        guard number == number.rounded(), abs(number) < 1e15 else { throw StepFailure("\"\(name)\" must be a whole number, not \(number)") }
        return Int(number)
    }

    func bool(_ name: String) throws(StepFailure) -> Bool? {
        guard let value = self[name] else { return nil }
        if let flag = value.boolValue { return flag }
        if value.stringValue == "true" { return true }
        if value.stringValue == "false" { return false }
        throw StepFailure("\"\(name)\" must be true or false, not \(value.serialized())")
    }

    func nested(_ name: String) -> StepFields? {
        self[name]?.objectValue.map(StepFields.init)
    }

    /// Whether `name` is present, even as null (`"userId": null` means "nobody").
    func has(_ name: String) -> Bool { object[name] != nil }
}
